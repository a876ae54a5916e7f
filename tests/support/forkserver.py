"""Fork servers for the processes the tests start most: ``skyd`` CLI calls and daemons
(no tests in here).

The suite makes about a thousand CLI calls and starts about two hundred daemons. Each
started a Python interpreter and imported the CLI (~0.1 CPU-s, most of a call's cost on
the 2-core CI box) or the daemon and its libraries (~0.9 CPU-s over a daemon's start and
first launch). A server per kind and test process imports them once and forks a child per
call. The child is a real process: it gets the call's argv, environment, working directory
and stdin/stdout/stderr, runs ``skyd.cli.main.main`` or ``python -m skyd.daemon``'s module,
and ends as the interpreter would (non-daemon threads joined, atexit handlers run, streams
flushed). The server is its parent: it reaps it and reports its wait status, so the test
sees the exit code, or the signal that killed it, as from ``subprocess``.

What a child cannot share with its server runs as a fresh process instead: a call whose
environment differs from the server's in anything Python reads only when it starts
(PYTHONPATH, locale, whether the network guard is on, ...). So do the tests about a
process's own start (the console script's imports, ``skyd daemon start``): they start
their processes themselves. A forked child's /proc environ is its server's (only the
settings above): the processes it starts with exec carry its own environment again.

Protocol, one connection per process: the client sends one byte carrying three file
descriptors (stdin, stdout, stderr), then a 4-byte length and a JSON request
``{"argv", "env", "cwd"}``; the server answers the child's pid (4 bytes) and, once it has
reaped the child, its wait status (4 bytes).
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]

# Environment a Python process reads once, at start: a call that differs from the server's
# in any of these runs as a fresh process.
_START_KEYS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONIOENCODING",
               "PYTHONUTF8", "PYTHONWARNINGS", "PYTHONHASHSEED", "PYTHONDEVMODE",
               "PYTHONFAULTHANDLER", "PYTHONTRACEMALLOC", "PYTHONUNBUFFERED",
               "PYTHONDONTWRITEBYTECODE", "LANG", "LC_ALL", "LC_CTYPE", "SKYD_TEST_PROC_LOG")
# Read at start only for whether it is set (the network guard's hook is installed then);
# the hook reads the file's name from the environment when it refuses something.
_START_PRESENCE = ("SKYD_NETGUARD_LOG",)

# What each kind imports before it forks. The CLI: its handlers' helpers (the parser
# imports the command modules). The daemon: what `python -m skyd.daemon` imports first,
# then its plugins, loaded as every daemon loads them at start (`load_plugins`: the
# built-in reads, then PLUGIN_MODULES in order, so every registration happens in a
# daemon's own order; the modules that register anything at import are all among them),
# then the models, wire types, libraries and skyd modules its start and first launches
# import lazily (`python -X importtime` of a daemon's start, one `local` launch and `down`:
# the skyd modules imported directly by code there).
_PRELOAD = {
    "cli": ("skyd.cli.main", "skyd.cli.client", "skyd.cli.output", "skyd.cli.progress",
            "skyd.cli.users", "skyd.cli.compat_flags", "skyd.cli.secret_flags",
            "skyd.sdk.payloads", "skyd.errors", "skyd.paths", "skyd.config", "yaml", "json"),
    "daemon": ("skyd.daemon.app", "skyd.models", "skyd.models.task", "skyd.models.service",
               "skyd.models.resources", "skyd.models.storage", "skyd.models.buckets",
               "skyd.daemon.api_models", "skyd.proto.skyd_agent", "importlib.metadata",
               "yaml", "pydantic", "pydantic.types", "aiohttp", "aiosqlite", "anyio",
               "grpclib.client", "grpclib.server", "h2.connection",
               "betterproto.grpc.grpclib_server", "betterproto.grpc.grpclib_client",
               "cryptography.x509", "cryptography.x509.verification",
               "cryptography.hazmat.primitives.asymmetric.ec", "urllib3",
               "botocore.session", "aiobotocore.session", "aiobotocore.client", "asyncssh"),
}
_DAEMON_LAZY = (
    "skyd.cloudnames", "skyd.clouds.aws.provisioner", "skyd.clouds.base", "skyd.clouds.billing",
    "skyd.clouds.catalog_refresh", "skyd.clouds.config_support", "skyd.clouds.crusoe.catalog",
    "skyd.clouds.crusoe.provisioner", "skyd.clouds.do.catalog", "skyd.clouds.do.provisioner",
    "skyd.clouds.gcp.api", "skyd.clouds.gcp.catalog", "skyd.clouds.gcp.instances",
    "skyd.clouds.gcp.provisioner", "skyd.clouds.hotaisle.provisioner",
    "skyd.clouds.kubernetes.api", "skyd.clouds.kubernetes.config",
    "skyd.clouds.kubernetes.inventory", "skyd.clouds.kubernetes.provisioner",
    "skyd.clouds.local_machine", "skyd.clouds.local_net", "skyd.clouds.neocloud.check",
    "skyd.clouds.runpod.api", "skyd.clouds.runpod.provisioner", "skyd.clouds.settings",
    "skyd.clouds.slurm.config", "skyd.clouds.ssh.cloud", "skyd.clouds.vultr.provisioner",
    "skyd.daemon.server", "skyd.jobs.controller", "skyd.jobs.manager", "skyd.jobs.pipeline_ops",
    "skyd.models.dag", "skyd.models.envsubst", "skyd.models.precheck",
    "skyd.models.secret_split", "skyd.nodeagent.client", "skyd.nodeagent.credentials",
    "skyd.nodeagent.reaper", "skyd.pipeline.backend", "skyd.pipeline.checks",
    "skyd.pipeline.cloudcheck", "skyd.pipeline.fit", "skyd.pipeline.jobspec",
    "skyd.pipeline.jobwatch", "skyd.pipeline.leaks", "skyd.pipeline.lifecycle",
    "skyd.pipeline.parsememo", "skyd.pipeline.plan_view", "skyd.pipeline.plancache",
    "skyd.pipeline.planner", "skyd.pipeline.preflight", "skyd.pipeline.provision",
    "skyd.pipeline.sshconfig", "skyd.pipeline.taskload", "skyd.serve.manager",
    "skyd.storage.db", "skyd.storage.mounts", "skyd.storage.s3", "skyd.transports.fuse",
    "skyd.transports.local", "skyd.transports.sandbox_ns",
    # and what a whole-suite profile showed forked daemons still importing themselves: a
    # config layer's schema, the Kubernetes client (~0.5 CPU-s), GCP's token source, the
    # serving proxy, Slurm's provisioner (every in-tree provider's module is added below)
    "skyd.config.schema", "skyd.models.loader", "kubernetes_asyncio", "kubernetes_asyncio.client",
    "kubernetes_asyncio.config", "gcloud.aio.auth", "skyd.serve.fastlb",
    "skyd.clouds.slurm.provisioner")


def _start_env(env: dict[str, str]) -> tuple[tuple[str, str | None], ...]:
    return (tuple((k, env.get(k)) for k in _START_KEYS)
            + tuple((k, "set" if env.get(k) else None) for k in _START_PRESENCE))


# -- the server (its own process: python -P -c "...forkserver.serve(PATH, KIND)") ------------

def serve(path: str, kind: str) -> None:
    import importlib

    if kind == "daemon":  # first what a daemon imports before anything else, in its order
        from skyd.daemon.app import load_plugins

        load_plugins()
    for name in _PRELOAD[kind] + (_DAEMON_LAZY if kind == "daemon" else ()):
        importlib.import_module(name)
    if kind == "daemon":
        from skyd.cloudnames import PROVIDERS
        from skyd.clouds.catalog import load_catalog

        for spec in PROVIDERS.values():
            importlib.import_module(spec.partition(":")[0])
        load_catalog()  # the bundled files: a child reading the same files reuses it
    if kind == "cli":
        from skyd.cli.commands import COMMAND_MODULES

        for name in COMMAND_MODULES:
            importlib.import_module(name)
    import gc

    gc.freeze()  # what the children inherit is never walked by their full collections
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
            elif key.fileobj is srv:
                _accept(srv, sel, kind)
            else:  # a child's pidfd: it ended
                conn, pid = key.data
                sel.unregister(key.fileobj)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                try:
                    conn.sendall(struct.pack("!i", status))
                except OSError:
                    pass
                conn.close()


def _accept(srv: socket.socket, sel: selectors.BaseSelector, kind: str) -> None:
    conn, _ = srv.accept()
    try:
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        req = json.loads(_recv_exact(conn, struct.unpack("!I", _recv_exact(conn, 4))[0]))
    except (OSError, ValueError, struct.error):
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        _child(kind, req, fds)  # never returns
    for fd in fds:
        os.close(fd)
    sel.register(os.pidfd_open(pid), selectors.EVENT_READ, (conn, pid))
    try:
        conn.sendall(struct.pack("!i", pid))
    except OSError:
        pass


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


def _child(kind: str, req: dict[str, Any], fds: list[int]) -> None:
    import atexit
    import traceback

    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        # the server's socket, connections and pidfds: as a process started with close_fds
        os.closerange(3, 65536)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        if kind == "cli":
            sys.argv = list(req["argv"])
            sys.path[0] = str(Path(sys.argv[0]).parent)  # the server's REPO entry: a script's
            from skyd.cli.main import main

            rc: Any = main()
        else:
            import runpy

            sys.argv = ["-m", *req["argv"][3:]]  # runpy puts the module's path first
            sys.path[0] = os.getcwd()  # python -m: the working directory
            runpy.run_module("skyd.daemon", run_name="__main__", alter_sys=True)
            rc = 0
    except SystemExit as e:
        rc = e.code
    except BaseException:  # noqa: BLE001 - an uncaught error ends the process as Python's would
        traceback.print_exc()
        rc = 1
    try:
        if rc is None:
            code = 0
        elif isinstance(rc, int):
            code = rc & 0xFF
        else:  # sys.exit("message"), as the interpreter reports it
            sys.stderr.write(f"{rc}\n")
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter's exit
        atexit._run_exitfuncs()
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except (OSError, ValueError):
                code = code or 120
    finally:
        os._exit(code)


# -- the client (in the test process) --------------------------------------------------------

class _Server:
    def __init__(self, kind: str, env: dict[str, str]) -> None:
        self.dir = tempfile.mkdtemp(prefix=f"skyd-fork-{kind}-")
        self.path = os.path.join(self.dir, "s")
        self.env = dict(env)
        self.owner = os.getpid()
        # Only what Python reads at start: the server is long-lived, and a test's SKYD_HOME or
        # HOME in its /proc environ would make it look like that test's leftover process.
        start = {k: v for k, v in self.env.items()
                 if k in _START_KEYS or k in _START_PRESENCE or k == "PATH"}
        with open(os.path.join(self.dir, "server.log"), "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-c",
                 "import sys; sys.path.insert(0, sys.argv[3]); "
                 "from tests.support import forkserver; forkserver.serve(sys.argv[1], sys.argv[2])",
                 self.path, kind, str(REPO)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=start,
                cwd=self.dir,
            )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline() != b"ready\n":
            raise RuntimeError(f"fork server did not start: see {self.dir}/server.log")
        atexit.register(self.close)

    def close(self) -> None:
        """The server ends when its stdin does; its children live on, as a Popen's would."""
        if self.owner != os.getpid():
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def usable(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None


_servers: dict[str, _Server] = {}
_lock = threading.Lock()


def _server_for(kind: str, env: dict[str, str]) -> _Server | None:
    """This process's server of `kind` (started on first use, with the environment its kind
    of process gets by default: this process's, the daemon's with the network guard on its
    PYTHONPATH); None when `env` differs from it in what Python reads at start."""
    base = dict(os.environ)
    if kind == "daemon":
        from tests.support.daemon import guarded_pythonpath

        base["PYTHONPATH"] = guarded_pythonpath()
    with _lock:
        s = _servers.get(kind)
        if s is None or not s.usable() or _start_env(s.env) != _start_env(base):
            s = _servers[kind] = _Server(kind, base)
        return s if _start_env(s.env) == _start_env(env) else None


def server_pids() -> list[int]:
    """This process's live servers."""
    return [s.proc.pid for s in _servers.values() if s.usable()]


def reaped_cpu(kind: str) -> float:
    """CPU seconds (user + sys) of the children this process's `kind` server has reaped
    (bench/forkserver_bench.py); 0 before it has started."""
    s = _servers.get(kind)
    if s is None or not s.usable():
        return 0.0
    fields = Path(f"/proc/{s.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime + cstime


class Forked:
    """A child of a fork server, as much of ``subprocess.Popen`` as the tests use."""

    def __init__(self, args: list[str], conn: socket.socket, stderr: IO[bytes] | None) -> None:
        self.args, self._conn, self.stderr = args, conn, stderr
        self.pid: int = struct.unpack("!i", _recv_exact(conn, 4))[0]
        self.returncode: int | None = None
        self._status = b""

    def _read_status(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        sel = selectors.DefaultSelector()
        sel.register(self._conn, selectors.EVENT_READ)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while len(self._status) < 4:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not sel.select(left):
                    return
                chunk = self._conn.recv(4 - len(self._status))
                if not chunk:  # the server died (a bug here): fail the test that asked
                    self.returncode = -9
                    return
                self._status += chunk
        finally:
            sel.close()
        self.returncode = os.waitstatus_to_exitcode(struct.unpack("!i", self._status)[0])
        self._conn.close()

    def poll(self) -> int | None:
        self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read_status(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        import signal

        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)


def _fork(kind: str, server: _Server, argv: list[str], env: dict[str, str], cwd: str,
          fds: tuple[int, int, int]) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(server.path)
    socket.send_fds(s, [b"x"], list(fds))
    body = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
    s.sendall(struct.pack("!I", len(body)) + body)
    return s


def run(argv: list[str], env: dict[str, str], timeout: float | None = None,
        input: str | None = None, cwd: str | os.PathLike[str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, env=env, input=input, cwd=cwd)``
    for a ``skyd`` console-script call (stdin /dev/null without ``input``, as the tests'
    processes have), forked from the CLI server when it can be."""
    server = _server_for("cli", env)
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
    try:
        s = _fork("cli", server, argv, env, os.fspath(cwd or os.getcwd()), (in_r, out_w, err_w))
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    child = Forked(argv, s, None)
    if in_w >= 0:
        threading.Thread(target=_feed, args=(in_w, (input or "").encode()), daemon=True).start()
    deadline = None if timeout is None else time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    sel = selectors.DefaultSelector()
    sel.register(out_r, selectors.EVENT_READ, out)
    sel.register(err_r, selectors.EVENT_READ, err)
    try:
        while sel.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                child.kill()
                child.wait(10)
                raise subprocess.TimeoutExpired(argv, timeout or 0, bytes(out), bytes(err))
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    key.data.extend(chunk)
                else:
                    sel.unregister(key.fileobj)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            rc = child.wait(left)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)
            raise subprocess.TimeoutExpired(argv, timeout or 0, bytes(out), bytes(err)) from None
    finally:
        sel.close()
        os.close(out_r)
        os.close(err_r)
    return subprocess.CompletedProcess(argv, rc, _text(out), _text(err))


def spawn_daemon(env: dict[str, str], cwd: str, stderr: int | IO[bytes]) -> Forked | None:
    """``python -m skyd.daemon`` with stdin and stdout on /dev/null and stderr on a pipe
    (``subprocess.PIPE``), /dev/null (``subprocess.DEVNULL``) or a file, forked from the daemon server; None when `env` needs a
    fresh process (start it with subprocess then)."""
    server = _server_for("daemon", env)
    if server is None:
        return None
    null_in = os.open(os.devnull, os.O_RDONLY)
    null_out = os.open(os.devnull, os.O_WRONLY)
    err_r = -1
    if stderr == subprocess.PIPE:
        err_r, err_w = os.pipe()
    elif stderr == subprocess.DEVNULL:
        err_w = os.open(os.devnull, os.O_WRONLY)
    else:
        err_w = os.dup(stderr if isinstance(stderr, int) else stderr.fileno())
    argv = [sys.executable, "-m", "skyd.daemon"]
    try:
        s = _fork("daemon", server, argv, env, cwd, (null_in, null_out, err_w))
    finally:
        for fd in (null_in, null_out, err_w):
            os.close(fd)
    return Forked(argv, s, open(err_r, "rb") if err_r >= 0 else None)  # noqa: SIM115


def _text(b: bytearray) -> str:
    # as text=True: the locale's encoding (UTF-8 here) with universal newlines
    return b.decode().replace("\r\n", "\n").replace("\r", "\n")


def _feed(fd: int, data: bytes) -> None:
    try:
        with open(fd, "wb", closefd=True) as f:
            f.write(data)
    except OSError:  # the child exited without reading it all, as subprocess ignores
        pass
