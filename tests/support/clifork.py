"""A fork server for the tests' ``skyd`` CLI calls (no tests in here).

The suite makes about a thousand CLI calls. Each used to start a Python interpreter and
import the CLI (~0.1 CPU-s, most of a call's cost on the 2-core CI box). One server per
test process imports the CLI once, then forks a child per call; the child is a real
process that runs ``skyd.cli.main.main`` with the call's argv, environment, working
directory and stdin/stdout/stderr (passed over a Unix socket), and its exit code is the
call's. What a call cannot share with the server (a different PYTHONPATH, locale or any
other setting Python reads only when it starts) runs as a fresh process instead, as do
the tests that are about the console script's own start (they call it themselves).

Protocol on the server's socket, one connection per call: the client sends one byte with
three file descriptors (stdin, stdout, stderr), then a 4-byte length and a JSON request
``{"argv", "env", "cwd"}``; the child answers its pid (4 bytes), runs, and answers its
exit code (4 bytes) as it exits. A connection that ends without a code is a killed child.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# Environment a Python process reads once, at start: a call that differs from the server's
# in any of these runs as a fresh process.
_START_KEYS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONIOENCODING",
               "PYTHONUTF8", "PYTHONWARNINGS", "PYTHONHASHSEED", "PYTHONDEVMODE",
               "PYTHONFAULTHANDLER", "PYTHONTRACEMALLOC", "PYTHONUNBUFFERED", "LANG",
               "LC_ALL", "LC_CTYPE", "SKYD_NETGUARD_LOG", "SKYD_TEST_PROC_LOG")

# What the CLI's handlers import when they run (the parser imports the command modules).
_PRELOAD = ("skyd.cli.main", "skyd.cli.client", "skyd.cli.output", "skyd.cli.progress",
            "skyd.cli.users", "skyd.cli.compat_flags", "skyd.cli.secret_flags",
            "skyd.sdk.payloads", "skyd.errors", "skyd.paths", "skyd.config", "yaml", "json")


def _start_env(env: dict[str, str]) -> tuple[tuple[str, str | None], ...]:
    return tuple((k, env.get(k)) for k in _START_KEYS)


# -- the server (runs in its own process: python -c "...clifork.serve(PATH)") ---------------

def serve(path: str) -> None:
    import importlib
    import signal

    for name in _PRELOAD:
        importlib.import_module(name)
    from skyd.cli.commands import COMMAND_MODULES

    for name in COMMAND_MODULES:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ)
    sel.register(sys.stdin, selectors.EVENT_READ)  # EOF: the test process is gone
    while True:
        for key, _ in sel.select():
            if key.fileobj is sys.stdin:
                if not os.read(sys.stdin.fileno(), 4096):
                    os._exit(0)
                continue
            conn, _ = srv.accept()
            try:
                _, fds, _, _ = socket.recv_fds(conn, 1, 3)
                req = json.loads(_recv_exact(conn, struct.unpack("!I", _recv_exact(conn, 4))[0]))
            except (OSError, ValueError, struct.error):
                conn.close()
                continue
            if os.fork() == 0:
                sel.close()
                srv.close()
                _child(conn, req, fds)  # never returns
            conn.close()
            for fd in fds:
                os.close(fd)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


def _child(conn: socket.socket, req: dict[str, Any], fds: list[int]) -> None:
    import atexit
    import signal
    import traceback

    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = list(req["argv"])
        sys.path[0] = str(Path(sys.argv[0]).parent)  # the server's REPO entry: as a script
        conn.sendall(struct.pack("!i", os.getpid()))
        from skyd.cli.main import main

        try:
            rc: Any = main()
        except SystemExit as e:
            rc = e.code
        if rc is None:
            code = 0
        elif isinstance(rc, int):
            code = rc & 0xFF
        else:  # sys.exit("message"), as the interpreter reports it
            sys.stderr.write(f"{rc}\n")
            code = 1
    except BaseException:  # noqa: BLE001 - an uncaught error ends the process as Python's would
        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except (OSError, ValueError):
                    code = code or 120
            conn.sendall(struct.pack("!i", code))
        finally:
            os._exit(code)


# -- the client (in the test process) --------------------------------------------------------

class _Server:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="skyd-clifork-")
        self.path = os.path.join(self.dir, "s")
        self.env = dict(os.environ)
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-c",
             "import sys; sys.path.insert(0, sys.argv[2]); "
             "from tests.support import clifork; clifork.serve(sys.argv[1])",
             self.path, str(REPO)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(os.path.join(self.dir, "server.log"), "wb"),  # noqa: SIM115
            env=self.env, cwd=self.dir,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline() != b"ready\n":
            raise RuntimeError(f"CLI fork server did not start: see {self.dir}/server.log")

    def alive(self) -> bool:
        return self.proc.poll() is None


_server: _Server | None = None
_lock = threading.Lock()


def _get_server(env: dict[str, str]) -> _Server | None:
    global _server
    with _lock:
        if _server is None or not _server.alive() or _server.owner != os.getpid():
            _server = _Server()
        if _start_env(_server.env) != _start_env(env):
            return None
        return _server


def run(argv: list[str], env: dict[str, str], timeout: float | None = None,
        input: str | None = None, cwd: str | os.PathLike[str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, env=env, input=input, cwd=cwd)``
    for a ``skyd`` console-script call (stdin /dev/null without ``input``, as the tests'
    processes have), forked from the server when it can be."""
    server = _get_server(env)
    if server is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                              input=input, cwd=cwd, check=False,
                              stdin=subprocess.DEVNULL if input is None else None)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    if input is not None:
        in_r, in_w = os.pipe()
    else:
        in_r, in_w = os.open(os.devnull, os.O_RDONLY), -1
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(server.path)
        socket.send_fds(s, [b"x"], [in_r, out_w, err_w])
        body = json.dumps({"argv": argv, "env": env, "cwd": os.fspath(cwd or os.getcwd())}).encode()
        s.sendall(struct.pack("!I", len(body)) + body)
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    deadline = None if timeout is None else time.monotonic() + timeout
    pid = struct.unpack("!i", _recv_exact(s, 4))[0]
    if in_w >= 0:
        threading.Thread(target=_feed, args=(in_w, (input or "").encode()), daemon=True).start()
    out, err, status = bytearray(), bytearray(), bytearray()
    sel = selectors.DefaultSelector()
    sel.register(out_r, selectors.EVENT_READ, out)
    sel.register(err_r, selectors.EVENT_READ, err)
    sel.register(s, selectors.EVENT_READ, status)
    try:
        while sel.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                _kill(pid)
                raise subprocess.TimeoutExpired(argv, timeout or 0, bytes(out), bytes(err))
            for key, _ in sel.select(left):
                chunk = s.recv(4096) if key.fileobj is s else os.read(key.fd, 65536)
                if chunk:
                    key.data.extend(chunk)
                else:
                    sel.unregister(key.fileobj)
    finally:
        sel.close()
        s.close()
        os.close(out_r)
        os.close(err_r)
    rc = struct.unpack("!i", bytes(status[:4]))[0] if len(status) >= 4 else -9
    return subprocess.CompletedProcess(argv, rc, _text(out), _text(err))


def _text(b: bytearray) -> str:
    # as text=True: the locale's encoding (UTF-8 here) with universal newlines
    return b.decode().replace("\r\n", "\n").replace("\r", "\n")


def _feed(fd: int, data: bytes) -> None:
    try:
        with open(fd, "wb", closefd=True) as f:
            f.write(data)
    except OSError:  # the child exited without reading it all, as subprocess ignores
        pass


def _kill(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
