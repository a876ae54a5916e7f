"""A warm agent to fork from: `local` nodes' agents start in milliseconds, not ~0.25 CPU-s.

A node agent's start is almost all imports (asyncio, grpclib, h2, betterproto, ssl). On
`local` every node's agent is a process on this machine started by the daemon, so the daemon
keeps one helper process (``python -m skyd.nodeagent.zygote``) that has imported the agent
once, and asks it to fork each agent:

- The helper is the daemon's child in its own session. It reads one JSON request per line on
  stdin ({argv, env, cwd, log}) and answers ``{"pid": N}`` on stdout. It exits when its stdin
  closes (the daemon stopped or died: ``kill -9`` of the daemon leaves no helper behind), or
  after ``IDLE_S`` without a request once none of its agents runs (while they do, it is
  their parent and reaps them).
- Each agent is a forked child with the agent's own session, environment, working directory
  and standard streams (stdin /dev/null, stdout and stderr its agent.log), running the same
  ``skyd.nodeagent.__main__.main`` that ``python -m skyd.nodeagent`` runs. Its command line
  (``/proc/PID/cmdline``, what ``ps`` shows and what finds a node's agents) is the agent's:
  the helper starts with room in its own argument area, and each child writes its command
  there. The helper ignores SIGCHLD, so the kernel reaps agents that end; agents outlive it.
- What the agent's interpreter reads only at start (PYTHON* variables, the locale) must be
  the helper's: a request with other values, an interpreter other than this one, a frozen
  daemon (no interpreter to start the helper with) or a command longer than the room fall
  back to a fresh process (``AgentZygote.spawn`` returns None), as does any failure of the
  helper (then it is not tried again for a minute).

The daemon side is `AgentZygote` (thread-safe: agents start from worker threads); the daemon
uses one (`enable` at start, `shared`, `close_shared` at stop), a process that embeds the
pipeline without a daemon starts agents fresh. The helper side is `serve`. Python 3.8 compatible: the module ships in the agent package.
"""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, %-format)

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from typing import Any

#: the helper exits after this long without a request and with no agent of its own running
#: (the daemon starts it again on demand)
IDLE_S = 600.0
#: room in the helper's argument area for an agent's command line (bytes)
ARGV_ROOM = 4096
#: after a failure of the helper, agents start fresh for this long
RETRY_AFTER_S = 60.0
#: how long the daemon waits for the helper's answer (it forks: milliseconds)
ANSWER_TIMEOUT_S = 10.0
PRELOAD = ("skyd.nodeagent.__main__", "skyd.nodeagent.server", "concurrent.futures.thread",
           "queue")  # fmt: skip


def start_keys(env: dict[str, str]) -> dict[str, str]:
    """The variables an interpreter reads at start (a forked agent keeps the helper's)."""
    return {k: v for k, v in env.items()
            if k.startswith("PYTHON") or k in ("LANG", "LANGUAGE") or k.startswith("LC_")}  # fmt: skip


def _encoded(argv: list[str]) -> bytes:
    return b"\0".join(os.fsencode(a) for a in argv) + b"\0"


# -- the daemon's side -------------------------------------------------------------------------

class AgentZygote:
    """The daemon's handle on its helper (started on first use; `close` at shutdown)."""

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._keys: dict[str, str] = {}
        self._room = 0
        self._retry_at = 0.0

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, log: str) -> int | None:
        """Fork an agent running ``argv`` (``[python, "-m", "skyd.nodeagent", ...]``); its pid,
        or None when it should start as a fresh process instead (module docstring)."""
        if getattr(sys, "frozen", False) or argv[:3] != [self.python, "-m", "skyd.nodeagent"]:
            return None
        keys = start_keys(env)
        with self._lock:
            if time.monotonic() < self._retry_at:
                return None
            if self._proc is not None and self._proc.poll() is not None:
                self._close_locked()  # it left (idle): start another
            if self._proc is None and not self._start_locked(keys):
                return None
            if keys != self._keys:
                return None
            if len(_encoded(argv)) > self._room:
                return None
            req = {"argv": argv, "env": env, "cwd": cwd, "log": log}
            try:
                answer = self._ask_locked(req)
                return int(answer["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                self._failed_locked()
                return None

    def close(self) -> None:
        """Stop the helper (its agents keep running)."""
        with self._lock:
            self._close_locked()

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _start_locked(self, keys: dict[str, str]) -> bool:
        env = {k: v for k, v in os.environ.items() if k not in start_keys(dict(os.environ))}
        env.update(keys)
        try:
            self._proc = subprocess.Popen(
                [self.python, "-m", "skyd.nodeagent.zygote", "x" * ARGV_ROOM],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=env, start_new_session=True, close_fds=True,
            )  # fmt: skip
            self._keys = keys
            hello = self._read_locked(ANSWER_TIMEOUT_S * 3)  # its imports
            self._room = int(hello["room"])
        except (OSError, ValueError, KeyError, TypeError):
            self._failed_locked()
            return False
        if self._room <= 0:  # it cannot write agents' command lines: never use it
            self._failed_locked()
            return False
        return True

    def _ask_locked(self, req: dict[str, Any]) -> dict[str, Any]:
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        proc.stdin.write(json.dumps(req).encode() + b"\n")
        proc.stdin.flush()
        return self._read_locked(ANSWER_TIMEOUT_S)

    def _read_locked(self, timeout: float) -> dict[str, Any]:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while not buf.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise OSError("the agent helper did not answer")
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise OSError("the agent helper exited")
                buf += chunk
        answer = json.loads(buf)
        if not isinstance(answer, dict):
            raise ValueError("the agent helper's answer is not an object")
        return answer

    def _failed_locked(self) -> None:
        self._close_locked()
        self._retry_at = time.monotonic() + RETRY_AFTER_S

    def _close_locked(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for f in (proc.stdin, proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        try:
            proc.wait(2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_SHARED: AgentZygote | None = None


def enable() -> None:
    """This process (the daemon) starts its `local` agents through one shared helper."""
    global _SHARED
    if _SHARED is None:
        _SHARED = AgentZygote()


def shared() -> AgentZygote | None:
    """The shared helper, if `enable` was called (else agents start as fresh processes)."""
    return _SHARED


def close_shared() -> None:
    """Stop the shared helper (daemon shutdown; the agents it started keep running)."""
    global _SHARED
    z, _SHARED = _SHARED, None
    if z is not None:
        z.close()


# -- the helper's side -------------------------------------------------------------------------

def _argv_area() -> tuple[int, int]:
    """[start, end) of this process's argument strings (proc(5): /proc/PID/stat fields 48, 49)."""
    with open("/proc/self/stat", "rb") as f:
        rest = f.read().rsplit(b")", 1)[1].split()
    return int(rest[45]), int(rest[46])


def _write_cmdline(argv: list[str]) -> bool:
    """Make ``argv`` this process's command line, in place in its argument area (as
    setproctitle(3) does; the rest of the area is zeroed). False if it does not fit or the
    area is not where /proc says (checked by reading it back first)."""
    import ctypes

    start, end = _argv_area()
    data = _encoded(argv)
    if end <= start or len(data) > end - start:
        return False
    with open("/proc/self/cmdline", "rb") as f:
        shown = f.read()
    if ctypes.string_at(start, end - start) != shown[:end - start]:
        return False
    ctypes.memmove(start, data + b"\0" * (end - start - len(data)), end - start)
    return True


def _run_agent(req: dict[str, Any]) -> None:
    """In the forked child: become the agent of ``req`` and never return."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, 65536)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        argv = [str(a) for a in req["argv"]]
        _write_cmdline(argv)
        from skyd.nodeagent import __main__ as agent_main

        sys.argv = [agent_main.__file__] + argv[3:]
        try:
            agent_main.main(argv[3:])
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                sys.stderr.write("%s\n" % (e.code,))
    except BaseException:  # noqa: BLE001 - reported in agent.log, as the interpreter would
        import traceback

        traceback.print_exc()
    finally:
        try:  # end as the interpreter would: threads joined, atexit run, streams flushed
            getattr(threading, "_shutdown", lambda: None)()
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(idle_s: float = IDLE_S) -> None:
    """The helper: import the agent, say how much room its command line has, then fork one
    agent per request until stdin closes or ``idle_s`` passes without one."""
    os.environ.setdefault("MULTIDICT_NO_EXTENSIONS", "1")  # as the agent's main sets it
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    import gc

    from skyd.nodeagent.executor import pid_alive

    gc.freeze()  # the imported agent: shared with every fork, never walked by its collections
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps ended agents
    start, end = _argv_area()
    room = end - start if _write_cmdline([sys.executable, "-m", "skyd.nodeagent.zygote"]) else 0
    out = sys.stdout.buffer
    out.write(json.dumps({"room": room, "pid": os.getpid()}).encode() + b"\n")
    out.flush()
    stdin = sys.stdin.fileno()  # read unbuffered: no child inherits queued requests
    buf = b""
    agents: set[int] = set()
    with selectors.DefaultSelector() as sel:
        sel.register(stdin, selectors.EVENT_READ)
        while True:
            if b"\n" not in buf:
                if not sel.select(idle_s):
                    agents = {p for p in agents if pid_alive(p, None)}
                    if not agents:
                        return  # idle, and no agent of ours to reap
                    continue
                chunk = os.read(stdin, 1 << 16)
                if not chunk:
                    return  # the daemon is gone
                buf += chunk
                continue
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _run_agent(req)
            agents.add(pid)
            out.write(json.dumps({"pid": pid}).encode() + b"\n")
            out.flush()


if __name__ == "__main__":
    serve()
