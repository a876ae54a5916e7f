"""The daemon process: root task group, store, RPC server, lifecycle, signals."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import importlib
import logging
import logging.handlers
import os
import resource
import signal
import socket
import stat
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from skyd import paths
from skyd.daemon import registry
from skyd.daemon.bus import EventBus
from skyd.daemon.notify import sd_notify
from skyd.daemon.requests import RequestManager
from skyd.daemon.store import Store
from skyd.errors import DaemonUnavailableError

log = logging.getLogger("skyd.daemon")

Hook = Callable[["Daemon"], Awaitable[None]]


class Daemon:
    """One per process. Plugins get it as ``ctx.daemon`` or in ``on_startup`` hooks."""

    def __init__(self, *, grace: float | None = None) -> None:
        self.pid = os.getpid()
        self.socket_path: Path = paths.socket_path()
        self.store = Store(paths.db_path())
        self.bus = EventBus()
        self.requests = RequestManager(self)
        self.grace = grace if grace is not None else float(os.environ.get("SKYD_SHUTDOWN_GRACE", "10"))
        self.started_mono = time.monotonic()
        self._tg: TaskGroup | None = None
        self._stop = anyio.Event()
        self._startup: list[Hook] = []
        self._shutdown: list[Hook] = []
        self._pid_fd: int | None = None

    # -- plugin API ------------------------------------------------------------------
    @property
    def tg(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError("daemon not running")
        return self._tg

    def spawn(self, name: str, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a long-lived task in the root task group. Its exceptions are logged, never
        fatal to the daemon; it is cancelled when the daemon stops."""

        async def guarded() -> None:
            try:
                await async_fn(*args)
            except anyio.get_cancelled_exc_class():
                if self.stray_cancel():
                    # A cancellation none of our scopes asked for (a library cancelled a
                    # future we awaited): re-raised, it would cancel the root task group.
                    log.error("task %s ended by a stray cancellation:\n%s", name,
                              traceback.format_exc())
                    return
                raise
            except BaseException:  # noqa: BLE001
                log.error("task %s crashed:\n%s", name, traceback.format_exc())

        self.tg.start_soon(guarded, name=name)

    def stray_cancel(self) -> bool:
        """In a root-group task that caught a cancellation: True when the daemon is not
        stopping, i.e. the task must end there rather than re-raise it (a child ending with
        a cancellation makes anyio cancel the whole root group: the daemon would exit)."""
        return self._tg is not None and not self._tg.cancel_scope.cancel_called

    def on_startup(self, fn: Hook) -> None:
        """Run ``await fn(daemon)`` after reconciliation, before the socket opens."""
        self._startup.append(fn)

    def on_shutdown(self, fn: Hook) -> None:
        """Run ``await fn(daemon)`` after requests are cancelled, before the DB closes."""
        self._shutdown.append(fn)

    def request_stop(self) -> None:
        self._stop.set()

    # -- lifecycle -------------------------------------------------------------------
    async def serve(self) -> None:
        setup_logging()
        _raise_nofile()
        self._lock_pid_file()
        try:
            await self._serve()
        finally:
            self._unlock_pid_file()

    async def _serve(self) -> None:
        from aiohttp import web

        from skyd.daemon.server import build_app

        load_plugins()
        self._startup = list(registry.STARTUP_HOOKS) + self._startup
        self._shutdown = list(registry.SHUTDOWN_HOOKS) + self._shutdown
        await self.store.open()
        log.info("skyd daemon pid %d starting (home %s, socket %s)", self.pid, paths.home(), self.socket_path)
        runner = web.AppRunner(build_app(self), access_log=None, shutdown_timeout=1.0,
                               handle_signals=False)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._signals, name="signals")
                await self.requests.reconcile()
                for hook in self._startup:
                    await hook(self)
                await runner.setup()
                sock = bind_socket(self.socket_path)
                site = web.SockSite(runner, sock)
                await site.start()
                sd_notify(f"READY=1\nMAINPID={self.pid}\nSTATUS=serving on {self.socket_path}")
                log.info("ready: serving on %s", self.socket_path)
                await self._stop.wait()
                log.info("stopping")
                sd_notify("STOPPING=1")
                await site.stop()  # stop accepting
                with contextlib.suppress(OSError):
                    self.socket_path.unlink()
                await self.requests.shutdown(self.grace)
                for hook in self._shutdown:
                    with anyio.move_on_after(self.grace):
                        await hook(self)
                await runner.cleanup()  # closes streams (watchers, followers)
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.store.close()
            self._tg = None
            with contextlib.suppress(OSError):
                if self.socket_path.exists():
                    self.socket_path.unlink()
            log.info("stopped")

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
            async for sig in sigs:
                log.info("signal %s", signal.Signals(sig).name)
                self._stop.set()
                # A second signal while stopping: exit hard after the grace bound.
                async for _ in sigs:
                    log.warning("second signal: exiting now")
                    os._exit(1)

    def _lock_pid_file(self) -> None:
        pf = paths.pid_file()
        pf.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(pf, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            other = pf.read_text().strip() or "?"
            raise DaemonUnavailableError(
                f"a skyd daemon (pid {other}) already runs for {paths.home()}",
                hint="stop it first: skyd daemon stop",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{self.pid}\n".encode())
        self._pid_fd = fd

    def _unlock_pid_file(self) -> None:
        if self._pid_fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._pid_fd, 0)
            os.close(self._pid_fd)
            self._pid_fd = None


def _private_dir_candidate(d: Path) -> bool:
    st = d.stat()
    shared = st.st_mode & (stat.S_ISVTX | stat.S_IWOTH)
    return st.st_uid == os.getuid() and not shared


def bind_socket(path: Path) -> socket.socket:
    """A listening AF_UNIX socket at ``path``: directory 0700, socket 0600 (no window).

    The directory is tightened only when it is ours alone: a shared directory (sticky or
    world-writable, such as /tmp, or owned by someone else) is left as it is -- the socket's
    own 0600 mode and the peer-uid check guard it there."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if _private_dir_candidate(path.parent):
        os.chmod(path.parent, 0o700)
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError as e:
            if e.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                raise
            path.unlink()  # stale socket from a dead daemon
        else:
            raise DaemonUnavailableError(f"another daemon answers on {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(512)
    sock.setblocking(False)
    return sock


def load_plugins() -> None:
    from skyd.daemon import builtins
    from skyd.daemon.plugins import PLUGIN_MODULES

    builtins.register()
    extra = [m.strip() for m in os.environ.get("SKYD_EXTRA_PLUGINS", "").split(",") if m.strip()]
    for name in [*PLUGIN_MODULES, *extra]:
        importlib.import_module(name)


def setup_logging() -> None:
    logfile = paths.daemon_log()
    logfile.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    if any(getattr(h, "_skyd", False) for h in root.handlers):
        return
    h = logging.handlers.RotatingFileHandler(logfile, maxBytes=10 * 1024 * 1024, backupCount=5)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    h._skyd = True  # type: ignore[attr-defined]
    root.addHandler(h)
    root.setLevel(os.environ.get("SKYD_LOG_LEVEL", "INFO").upper())
    if os.environ.get("SKYD_LOG_STDERR") or sys.stderr.isatty():
        s = logging.StreamHandler()
        s.setFormatter(h.formatter)
        s._skyd = True  # type: ignore[attr-defined]
        root.addHandler(s)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))


def main(argv: list[str] | None = None) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT."""
    try:
        anyio.run(Daemon().serve)
    except DaemonUnavailableError as e:
        print(f"error: {e}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        return e.exit_code
    return 0
