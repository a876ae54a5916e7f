"""Wiring: the gRPC server plus the event loop (the logic lives in the modules beside it)."""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from grpclib.encoding.proto import ProtoCodec
from grpclib.server import Server

from . import VERSION, auth, events, gpu
from .core import Agent
from .service import NodeAgentService

log = logging.getLogger("skyd.nodeagent")


class CredentialsError(RuntimeError):
    pass


def take_home_lock(home: Path, grace: float = 5.0) -> Any:
    """One agent per home: hold an exclusive flock on HOME/agent.lock for our lifetime.

    A second agent started on the same home (a daemon that died between starting an agent
    and seeing its agent.json, then started another) takes over: the older one is asked to
    leave (SIGTERM: its jobs keep running and this agent adopts them), then killed. Without
    this the older agent would keep running unseen, with credentials nobody expects.
    """
    import fcntl

    fd = os.open(str(home / "agent.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + grace
    signalled = 0
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            pass
        try:
            other = int(os.pread(fd, 32, 0).decode().strip() or "0")
        except (OSError, ValueError):
            other = 0
        if other > 0 and other != os.getpid():
            sig = signal.SIGTERM if time.monotonic() < deadline else signal.SIGKILL
            if signalled != sig:
                log.warning("another agent (pid %d) holds %s; stopping it", other, home)
                try:
                    os.kill(other, sig)
                except OSError:
                    pass
                signalled = sig
        time.sleep(0.05)
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON atomically, 0600 from creation (agent.json names the agent's port)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.unlink()
    except OSError:
        pass
    fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data))
    os.replace(str(tmp), str(path))


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` (0600, replacing a stale one). A path longer than
    sun_path allows is bound through its directory's /proc/self/fd entry."""
    try:
        path.unlink()
    except OSError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = str(path)
    dir_fd = -1
    if len(name.encode()) > 100:
        dir_fd = os.open(str(path.parent), os.O_RDONLY)
        name = "/proc/self/fd/%d/%s" % (dir_fd, path.name)
    old = os.umask(0o177)
    try:
        sock.bind(name)
    finally:
        os.umask(old)
        if dir_fd >= 0:
            os.close(dir_fd)
    sock.listen(100)
    sock.setblocking(False)
    return sock


def node_memory_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 0.0


async def serve(home: Path, listen_addr: str, tls_dir: Path | None, rank: int,
                cluster: str, autostop_action: str, cpus: float | None,
                fake_gpus: str | None, tick_s: float, heartbeat_s: float,
                socket_path: str | None = None,
                rank_lease_s: float | None = None) -> None:  # fmt: skip
    home.mkdir(parents=True, exist_ok=True)
    tls_dir = tls_dir or home
    why = auth.check_files(tls_dir)
    if why:
        raise CredentialsError("node agent: cannot authenticate its channel: " + why)
    tls = auth.server_context(tls_dir)
    lock_fd = take_home_lock(home)  # noqa: F841 - held (open) for the agent's lifetime
    try:  # an older daemon's cluster token: never left on the node
        (home / auth.LEGACY_TOKEN).unlink()
    except OSError:
        pass
    loop = asyncio.get_event_loop()
    gpus = gpu.fake_gpus(fake_gpus) if fake_gpus else await loop.run_in_executor(None, gpu.detect)
    for stale in ("stopped.json", "agent.json"):
        try:
            (home / stale).unlink()
        except OSError:
            pass
    agent = Agent(home, rank=rank, cluster=cluster, peer_ssl=auth.peer_context(tls_dir), gpus=gpus,
                  cpus=float(cpus if cpus is not None else (os.cpu_count() or 1)),
                  memory_gb=node_memory_gb(), autostop_action=autostop_action)  # fmt: skip
    if rank_lease_s is not None:
        agent.rank_lease_s = rank_lease_s
    agent.recover()
    # An explicit codec: left to choose, grpclib imports googleapis' status protos (~25 ms of
    # every start, where installed) for error details the agent never sends.
    server = Server([NodeAgentService(agent)], codec=ProtoCodec())
    info: dict[str, Any] = {"pid": os.getpid(), "version": VERSION, "started_at": time.time(),
                            "rank": rank, "cluster": cluster}  # fmt: skip
    if listen_addr.startswith("unix:"):
        await server.start(sock=bind_unix(Path(listen_addr[5:])), ssl=tls)
        info.update(host=None, port=None, socket=listen_addr[5:])
    else:
        host, _, port = listen_addr.rpartition(":")
        await server.start(host or "127.0.0.1", int(port), ssl=tls)
        sock = server._server.sockets[0]  # type: ignore[union-attr]
        info.update(host=host or "127.0.0.1", port=sock.getsockname()[1], socket=None)
    # The Unix socket too (unless the main listener is one): the daemon's exec relay reaches
    # the agent through it on nodes whose sshd refuses TCP forwarding.
    side: Server | None = None
    if info["socket"] is None and socket_path != "":
        side_path = Path(socket_path) if socket_path else home / "agent.sock"
        side = Server([NodeAgentService(agent)], codec=ProtoCodec())
        await side.start(sock=bind_unix(side_path), ssl=tls)
        info["socket"] = str(side_path)
    write_json_atomic(home / "agent.json", info)
    log.info("node agent %s listening: %s", VERSION, info)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, agent.exit_requested.set)
    ev = asyncio.ensure_future(events.event_loop(agent, tick_s, heartbeat_s))
    await agent.exit_requested.wait()
    # Leaving: jobs keep running in their own sessions and are re-adopted on restart.
    ev.cancel()
    for task in list(agent.drivers.values()):
        task.cancel()
    await asyncio.gather(ev, *agent.drivers.values(), return_exceptions=True)
    for srv in (server, side):
        if srv is not None:
            srv.close()
            await srv.wait_closed()
    agent.queue.close()
    try:
        (home / "agent.json").unlink()
    except OSError:
        pass
    log.info("node agent exited")
