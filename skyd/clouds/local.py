"""The `local` infra: the embedded default when no cloud is enabled.

A cluster of N nodes is N sandboxes on this machine, one directory each under
``$SKYD_HOME/local/<cluster>/node-<rank>``, each with a real node agent started detached
(its own process session) so it outlives a daemon restart; the daemon finds it again
through ``agent.json`` in the sandbox. Cost is 0. This machine's real GPUs (if any) are
offered as the node's accelerators.

Layout of a sandbox (``node_dir``):
  agent.json, agent.log, token (0600), jobs.db ... -- the agent's own files
  home/            HOME of the jobs; ``~/x`` file-mount targets land here
  workdir/         the synced workdir (the job's cwd), like SkyPilot's ~/sky_workdir
  root/            absolute file-mount targets (``/data`` -> ``root/data``)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import anyio

from skyd import paths
from skyd.clouds.base import (
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    NODE_UNKNOWN,
    Cloud,
    ClusterHandle,
    LogFn,
    NodeHandle,
    Provisioner,
    ProvisionRequest,
    register_cloud,
)
from skyd.clouds.offering import Offering

LOCAL = "local"
STOPPED_MARK = "stopped.json"
WORKDIR_DST = "workdir"  # skyd.pipeline.backend.WORKDIR: the job's cwd, under the node dir  # written by the agent on autostop, and by `skyd stop`


def _memory_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / (1024 * 1024), 1)
    except OSError:
        pass
    return 0.0


def detect_local_gpus() -> tuple[str | None, int]:
    """(canonical accelerator name, count) of this machine's GPUs, or (None, 0)."""
    try:
        from skyd.nodeagent import gpu
    except ImportError:  # pragma: no cover - agent package missing
        return None, 0
    gpus = gpu.detect()
    if not gpus:
        return None, 0
    name = getattr(gpus[0], "name", None)
    return (str(name) if name else None), len(gpus)


class LocalProvisioner(Provisioner):
    """Sandboxes with real agents under ``root`` (default: SKYD_HOME/local)."""

    def __init__(self, root: Path | None = None, *, cloud_name: str = LOCAL) -> None:
        self._root = root
        self.cloud_name = cloud_name

    @property
    def root(self) -> Path:
        return self._root if self._root is not None else paths.sandboxes_dir()

    def cluster_dir(self, cluster: str) -> Path:
        return self.root / cluster

    def node_dir(self, cluster: str, rank: int) -> Path:
        return self.cluster_dir(cluster) / f"node-{rank}"

    # -- agents ---------------------------------------------------------------------------

    def _agent_info(self, node_dir: Path) -> dict[str, Any] | None:
        try:
            return dict(json.loads((node_dir / "agent.json").read_text()))
        except (OSError, ValueError):
            return None

    @staticmethod
    def _pid_alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # A zombie counts as dead.
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(")")[-1].split()[0] != "Z"
        except OSError:
            return True

    def agent_alive(self, node_dir: Path) -> bool:
        info = self._agent_info(node_dir)
        return bool(info) and self._pid_alive(int(info["pid"]))  # type: ignore[index]

    async def _start_agent(self, handle_cluster: str, rank: int, node_dir: Path) -> dict[str, Any]:
        from skyd.nodeagent.client import start_agent_detached

        (node_dir / "agent.json").unlink(missing_ok=True)
        (node_dir / STOPPED_MARK).unlink(missing_ok=True)
        info = await start_agent_detached(
            node_dir,
            listen="127.0.0.1:0",
            token_file=node_dir / "token",
            rank=rank,
            cluster=handle_cluster,
            extra_args=["--autostop-action", "local-stop"],
            # Jobs inherit the agent's environment: `~` must be the sandbox's home/, so
            # setup/run writing ~/x stay inside SKYD_HOME (as ~/x file mounts do).
            env={**os.environ, "HOME": str(node_dir / "home")},
        )
        return dict(info)

    # -- Provisioner ----------------------------------------------------------------------

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        nodes: list[NodeHandle] = []
        for rank in range(req.num_nodes):
            node_dir = self.node_dir(req.cluster_name, rank)
            for sub in ("home", "workdir", "root"):
                (node_dir / sub).mkdir(parents=True, exist_ok=True)
            token_file = node_dir / "token"
            fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(req.token)
            nodes.append(
                NodeHandle(
                    rank=rank,
                    instance_id=f"{req.cluster_name}-{rank}",
                    internal_ip="127.0.0.1",
                    node_dir=str(node_dir),
                )
            )

        async def start(node: NodeHandle) -> None:
            nd = Path(node.node_dir)
            if self.agent_alive(nd):
                info = self._agent_info(nd) or {}
            else:
                info = await self._start_agent(req.cluster_name, node.rank, nd)
            node.agent_port = int(info["port"])

        async with anyio.create_task_group() as tg:
            for node in nodes:
                tg.start_soon(start, node)
        log(f"Started {len(nodes)} local node agent(s) under {self.cluster_dir(req.cluster_name)}")
        off = req.offering
        return ClusterHandle(
            cluster_name=req.cluster_name,
            cloud=self.cloud_name,
            region=off.region,
            zone=off.zone,
            instance_type=off.instance_type,
            use_spot=req.use_spot,
            accelerators={off.accelerator: off.accelerator_count} if off.accelerator else {},
            num_nodes=req.num_nodes,
            hourly_cost=(off.hourly(req.use_spot) or 0.0) * req.num_nodes,
            nodes=nodes,
            token=req.token,
            cpus=off.vcpus,
            memory_gib=off.memory_gib,
        )

    async def query(self, handle: ClusterHandle) -> list[str]:
        out = []
        for node in handle.nodes:
            nd = Path(node.node_dir)
            if not nd.exists():
                out.append(NODE_TERMINATED)
            elif (nd / STOPPED_MARK).exists():
                out.append(NODE_STOPPED)
            elif self.agent_alive(nd):
                out.append(NODE_RUNNING)
            else:
                out.append(NODE_UNKNOWN)
        return out

    async def _shutdown_agents(self, handle: ClusterHandle) -> None:
        from skyd.nodeagent.client import AgentClient

        async def one(node: NodeHandle) -> None:
            nd = Path(node.node_dir)
            info = self._agent_info(nd)
            if not info or not self._pid_alive(int(info["pid"])):
                return
            try:
                with anyio.fail_after(10):
                    async with AgentClient("127.0.0.1", int(info["port"]), handle.token) as c:
                        await c.shutdown(exit=True)
            except Exception:  # noqa: BLE001 - fall back to signals below
                pass
            pid = int(info["pid"])
            with anyio.move_on_after(5):
                while self._pid_alive(pid):
                    await anyio.sleep(0.05)
            if self._pid_alive(pid):
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.killpg(os.getpgid(pid), sig)
                    except (ProcessLookupError, PermissionError):
                        break
                    await anyio.sleep(0.2)

        async with anyio.create_task_group() as tg:
            for node in handle.nodes:
                tg.start_soon(one, node)

    async def _reap_jobs(self, node_dirs: list[Path]) -> None:
        """End every job process group recorded on these nodes (the agent may be dead), and
        any agent still running there (one that was starting when its launch died has no
        agent.json yet, and would otherwise outlive its sandbox)."""
        from skyd.nodeagent.reaper import kill_recorded_groups

        for nd in node_dirs:
            if not str(nd).startswith(str(self.root)):
                continue  # only this infra's sandboxes
            for pid in await anyio.to_thread.run_sync(_agents_on, nd):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if nd.exists():
                await anyio.to_thread.run_sync(kill_recorded_groups, nd)

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        await self._shutdown_agents(handle)
        await self._reap_jobs([Path(n.node_dir) for n in handle.nodes if n.node_dir])
        for node in handle.nodes:
            nd = Path(node.node_dir)
            if nd.exists():
                (nd / STOPPED_MARK).write_text(json.dumps({"stopped_at": time.time(), "down": False}))
        log(f"Stopped {len(handle.nodes)} local node(s)")

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        async def one(node: NodeHandle) -> None:
            nd = Path(node.node_dir)
            if not nd.exists():
                from skyd.errors import ClusterStateError

                raise ClusterStateError(
                    f"node {node.rank} of {handle.cluster_name!r} is gone ({nd} missing)",
                    hint=f"skyd down {handle.cluster_name} and launch it again",
                )
            if not self.agent_alive(nd):
                info = await self._start_agent(handle.cluster_name, node.rank, nd)
                node.agent_port = int(info["port"])

        async with anyio.create_task_group() as tg:
            for node in handle.nodes:
                tg.start_soon(one, node)
        log(f"Started {len(handle.nodes)} local node(s)")
        return handle

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        states = await self.query(handle)
        if NODE_TERMINATED in states or NODE_STOPPED in states:
            return handle
        if all(s == NODE_RUNNING for s in states):
            for node in handle.nodes:
                info = self._agent_info(Path(node.node_dir))
                if info:
                    node.agent_port = int(info["port"])
            return handle
        log("Restarting node agents that are not running")
        return await self.start(handle, log)

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        await self._shutdown_agents(handle)
        cdir = self.cluster_dir(handle.cluster_name)
        await self._reap_jobs(sorted(cdir.glob("node-*")) if cdir.exists() else [])
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(cdir, ignore_errors=True))
        log(f"Removed {cdir}")

    async def forget(self, cluster_name: str) -> None:
        cdir = self.cluster_dir(cluster_name)
        for nd in sorted(cdir.glob("node-*")) if cdir.exists() else []:
            info = self._agent_info(nd)
            if info and self._pid_alive(int(info["pid"])):
                try:
                    os.killpg(os.getpgid(int(info["pid"])), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        await self._reap_jobs(sorted(cdir.glob("node-*")) if cdir.exists() else [])
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(cdir, ignore_errors=True))

    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        info = self._agent_info(Path(handle.nodes[rank].node_dir))
        port = int(info["port"]) if info else handle.nodes[rank].agent_port
        return "127.0.0.1", port

    def remote_path(self, handle: ClusterHandle, rank: int, dst: str) -> Path:
        """Where a path on the node lives in its sandbox."""
        nd = Path(handle.nodes[rank].node_dir)
        if dst.startswith("~/") or dst == "~":
            return nd / "home" / dst[2:]
        if dst.startswith("/"):
            return nd / "root" / dst.lstrip("/")
        if dst == WORKDIR_DST:
            return nd / dst
        return nd / "home" / dst  # relative targets are relative to ~, as in SkyPilot

    async def sync_dir(
        self, handle: ClusterHandle, rank: int, src: str, dst: str, excludes: list[str]
    ) -> tuple[int, int]:
        target = self.remote_path(handle, rank, dst)
        source = Path(src)
        if source.is_file():
            def copy_file() -> int:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
                return source.stat().st_size

            return 1, await anyio.to_thread.run_sync(copy_file)
        from skyd.pipeline.sync import sync_local_dir

        stats = await sync_local_dir(source, target, excludes)
        return stats.files, stats.bytes


def _agents_on(node_dir: Path) -> list[int]:
    """Live node-agent processes whose --home is this node dir (found in /proc)."""
    wants = {b"\0--home\0" + str(p).encode() + b"\0" for p in (node_dir, Path(node_dir).resolve())}
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if any(w in cmd + b"\0" for w in wants) and LocalProvisioner._pid_alive(int(name)):
            out.append(int(name))
    return out


class LocalCloud(Cloud):
    name = LOCAL
    unsupported = frozenset({"bucket_mounts", "spot", "ports"})

    def __init__(self) -> None:
        self._prov = LocalProvisioner()
        self._offering: Offering | None = None

    def check(self) -> tuple[bool, str]:
        return True, "always available: nodes are sandboxes on this machine"

    def dynamic_offerings(self) -> list[Offering]:
        if self._offering is None:
            acc, count = detect_local_gpus()
            self._offering = Offering(
                cloud=LOCAL,
                instance_type="local",
                accelerator=acc,
                accelerator_count=float(count),
                vcpus=float(os.cpu_count() or 1),
                memory_gib=_memory_gib(),
                region="local",
                zone=None,
                price=0.0,
                spot_price=None,
            )
        return [self._offering]

    def provisioner(self) -> Provisioner:
        return self._prov


register_cloud(LOCAL, LocalCloud)
