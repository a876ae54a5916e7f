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
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from skyd import paths, settings
from skyd.daemon import diskspace, owners, registry
from skyd.daemon.bus import EventBus
from skyd.daemon.connections import (
    KEEPALIVE_TIMEOUT,
    ConnectionGuard,
    GuardedSockSite,
    header_timeout_from_env,
    limit_from_env,
)
from skyd.daemon.host import Hook
from skyd.daemon.notify import sd_notify
from skyd.daemon.requests import RequestManager
from skyd.daemon.store import Store
from skyd.errors import DaemonUnavailableError
from skyd.privatefs import PRIVATE_UMASK, private_mkdir, tighten_home, unsafe_dir_reason

log = logging.getLogger("skyd.daemon")


class Daemon:
    """One per process. Plugins get it as ``ctx.daemon`` or in ``on_startup`` hooks."""

    def __init__(self, *, grace: float | None = None) -> None:
        self.pid = os.getpid()
        self.socket_path: Path = paths.socket_path()
        self.store = Store(paths.db_path())
        self.bus = EventBus()
        self.requests = RequestManager(self)
        self.grace = grace if grace is not None else settings.SHUTDOWN_GRACE.get()
        self.started_mono = time.monotonic()
        self._tg: TaskGroup | None = None
        self._stop = anyio.Event()
        self._startup: list[Hook] = []
        self._shutdown: list[Hook] = []
        self._pid_fd: int | None = None
        self.connections = ConnectionGuard(1)
        self.access = owners.Access()  # who may connect (a shared daemon: a Unix group too)
        self.shared_socket: Path | None = (
            paths.shared_socket_path() if self.access.shared else None)

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
        # Everything the daemon writes is private from its first write (state.db and its
        # WAL, logs, request files, node directories and the agents it starts).
        old_umask = os.umask(PRIVATE_UMASK)
        # Jobs on local nodes run under the user's own umask, not the daemon's.
        os.environ.setdefault(settings.JOB_UMASK.name, f"{old_umask:03o}")
        try:
            private_mkdir(paths.home())
            prepare_socket_dir(self.socket_path)
            degraded = diskspace.start_degraded_if_full()
            setup_logging()
            if degraded:
                log.warning("starting on a full disk (%s): the reserve was released; "
                            "requests that write may fail until there is room",
                            paths.home())
            _raise_nofile()
            self._lock_pid_file()
            try:
                changed = await anyio.to_thread.run_sync(tighten_home, paths.home())
                if changed:
                    log.info("made %d existing file(s)/dir(s) under %s private", changed,
                             paths.home())
                await self._serve()
            finally:
                self._unlock_pid_file()
        finally:
            os.umask(old_umask)

    async def _serve(self) -> None:
        from aiohttp import web

        from skyd.daemon.server import build_app

        load_plugins()
        self._startup = list(registry.STARTUP_HOOKS) + self._startup
        self._shutdown = list(registry.SHUTDOWN_HOOKS) + self._shutdown
        await self.store.open()
        log.info("skyd daemon pid %d starting (home %s, socket %s)", self.pid, paths.home(), self.socket_path)
        # Deadlines for request heads and idle keep-alive: see skyd.daemon.connections.
        runner = web.AppRunner(build_app(self, self.requests), access_log=None, shutdown_timeout=1.0,
                               handle_signals=False, keepalive_timeout=KEEPALIVE_TIMEOUT)
        self.connections = ConnectionGuard(limit_from_env(), header_timeout_from_env())
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._signals, name="signals")
                self.spawn("disk reserve", diskspace.keep_reserve)
                await self.requests.reconcile()
                for hook in self._startup:
                    await hook(self)
                await runner.setup()
                sock = bind_socket(self.socket_path)
                site = GuardedSockSite(runner, sock, self.connections)
                await site.start()
                shared_site = None
                if self.shared_socket is not None and self.access.shared_gid is not None:
                    ssock = bind_shared_socket(self.shared_socket, self.access.shared_gid)
                    shared_site = GuardedSockSite(runner, ssock, self.connections)
                    await shared_site.start()
                    log.info("shared with group %d on %s", self.access.shared_gid,
                             self.shared_socket)
                sd_notify(f"READY=1\nMAINPID={self.pid}\nSTATUS=serving on {self.socket_path}")
                log.info("ready: serving on %s", self.socket_path)
                await self._stop.wait()
                log.info("stopping")
                sd_notify("STOPPING=1")
                await site.stop()  # stop accepting
                with contextlib.suppress(OSError):
                    self.socket_path.unlink()
                if shared_site is not None and self.shared_socket is not None:
                    await shared_site.stop()
                    with contextlib.suppress(OSError):
                        self.shared_socket.unlink()
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
        private_mkdir(pf.parent)
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
        self._pid_fd = fd
        try:
            # Written in place at a fixed width (no truncate): the file's block is reused, so
            # a restart on a full disk still records its pid.
            os.pwrite(fd, f"{self.pid:<15}\n".encode(), 0)
        except OSError as e:  # a full disk: the lock is what counts; the pid is a courtesy
            log.warning("cannot write the pid file %s: %s", pf, e)

    def _unlock_pid_file(self) -> None:
        if self._pid_fd is not None:
            with contextlib.suppress(OSError):
                os.pwrite(self._pid_fd, b" " * 15 + b"\n", 0)  # keep the block (full disks)
            os.close(self._pid_fd)
            self._pid_fd = None


def _skyd_owned_dir(d: Path) -> bool:
    """A socket directory that is skyd's own by name (SKYD_HOME/run, $XDG_RUNTIME_DIR/skyd):
    it may be tightened even when an earlier run (or version) created it."""
    ours = {paths.home() / "run"}
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        ours.add(Path(runtime) / "skyd")
    try:
        real = d.resolve()
        return any(real == o.resolve() for o in ours) and d.stat().st_uid == os.getuid()
    except OSError:
        return False


def prepare_socket_dir(path: Path) -> None:
    """The socket's directory, checked (and created 0700 when missing) before anything else
    starts: an unsafe one is refused with a message (DaemonUnavailableError)."""
    created = private_mkdir(path.parent)
    if not created:
        if _skyd_owned_dir(path.parent):
            os.chmod(path.parent, 0o700)
        else:
            reason = unsafe_dir_reason(path.parent)
            if reason is not None:
                raise DaemonUnavailableError(
                    f"refusing to put the daemon's socket {path} there: {reason}",
                    hint="set SKYD_SOCKET to a path in a directory of your own (a new "
                         "directory is created 0700)")


def bind_socket(path: Path, *, check_dir: bool = True) -> socket.socket:
    """A listening AF_UNIX socket at ``path``: socket 0600 (no window with a wider mode).

    Only directories skyd created (now, or skyd's own by name: SKYD_HOME/run,
    $XDG_RUNTIME_DIR/skyd) are made 0700. Any other directory is never changed: a shared
    one (sticky, such as /tmp) or one of the user's (~/project, /) is used as it is -- the
    socket's 0600 and the peer-uid check guard it -- and one where another user could
    replace the socket (writable by others and not sticky, or someone else's) is refused."""
    if check_dir:
        prepare_socket_dir(path)
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


def bind_shared_socket(path: Path, gid: int) -> socket.socket:
    """The shared daemon's second socket: mode 0660, group ``gid``, in a directory of the
    daemon's user (created 0750, group ``gid``). A directory someone else made, or one that
    is a symlink, is refused: nothing else of the daemon's is reachable by that group."""
    d = path.parent
    try:
        os.mkdir(d, 0o750)
    except FileExistsError:
        pass
    except OSError as e:
        raise DaemonUnavailableError(
            f"cannot create the shared socket's directory {d}: {e.strerror}",
            field="SKYD_SHARED_SOCKET", hint="set SKYD_SHARED_SOCKET to a path in a directory "
                                              "the daemon's user may create") from None
    st = os.lstat(d)
    if not os.path.isdir(d) or os.path.islink(d) or st.st_uid != os.getuid():
        raise DaemonUnavailableError(
            f"refusing to put the shared socket {path} in {d}: it is not a directory of "
            f"this user's", field="SKYD_SHARED_SOCKET",
            hint="set SKYD_SHARED_SOCKET to a path in a new directory")
    try:
        os.chown(d, -1, gid)
    except PermissionError:
        raise DaemonUnavailableError(
            f"cannot give {d} to group {gid}: the daemon's user is not in that group",
            field="SKYD_SHARED_GROUP", hint="add the daemon's user to the group (usermod -aG)"
        ) from None
    os.chmod(d, 0o750)
    sock = bind_socket(path, check_dir=False)
    os.chown(path, -1, gid)
    os.chmod(path, 0o660)
    return sock


def load_plugins() -> None:
    from skyd.daemon import builtins
    from skyd.daemon.plugins import PLUGIN_MODULES

    builtins.register()
    for name in [*PLUGIN_MODULES, *settings.EXTRA_PLUGINS.get()]:
        importlib.import_module(name)


def setup_logging() -> None:
    logfile = paths.daemon_log()
    private_mkdir(logfile.parent)
    root = logging.getLogger()
    if any(getattr(h, "_skyd", False) for h in root.handlers):
        return
    h = logging.handlers.RotatingFileHandler(logfile, maxBytes=10 * 1024 * 1024, backupCount=5)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    h._skyd = True  # type: ignore[attr-defined]
    root.addHandler(h)
    root.setLevel(settings.LOG_LEVEL.get().upper())
    if settings.LOG_STDERR.get() or sys.stderr.isatty():
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
        try:
            anyio.run(Daemon().serve)
        except BaseExceptionGroup as eg:  # raised at start inside the root task group
            first = _first_unavailable(eg)
            if first is None:
                raise
            raise first from None
    except DaemonUnavailableError as e:
        print(f"error: {e}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        return e.exit_code
    return 0


def _first_unavailable(eg: BaseExceptionGroup) -> DaemonUnavailableError | None:  # type: ignore[type-arg]
    for e in eg.exceptions:
        if isinstance(e, DaemonUnavailableError):
            return e
        if isinstance(e, BaseExceptionGroup):
            found = _first_unavailable(e)
            if found is not None:
                return found
    return None
