"""The `local` infra: the embedded default when no cloud is enabled.

A cluster of N nodes is N sandboxes on this machine, one directory each under
``$SKYD_HOME/local/<cluster>/node-<rank>``, each with a real node agent started detached
(its own process session) so it outlives a daemon restart; the daemon finds it again
through ``agent.json`` in the sandbox, and reaches and stops it through
skyd.transports (``LocalTransport`` + ``agent_deploy``). Cost is 0. This machine's real GPUs (if any) are
offered as the node's accelerators.

Layout of a sandbox (``node_dir``):
  agent.json, agent.log, token (0600), jobs.db ... -- the agent's own files
  home/            HOME of the jobs; ``~/x`` file-mount targets land here
  home/sky_workdir -> ../workdir (SkyPilot's ~/sky_workdir)
  workdir/         the synced workdir (the job's cwd)
  root/            absolute file-mount targets (``/data`` -> ``root/data``), which each job
                   sees at ``/data`` in its mount namespace (skyd.transports.sandbox_ns)
  .skyd/           nsexec (the job wrapper), ns-binds.json, ns.args; rclone's files

Each node of the ``local`` infra has its own loopback address (skyd.clouds.local_net): its
agent listens there, SKYPILOT_NODE_IPS names it, and its jobs may bind it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from skyd import fsutil, paths, settings
from skyd.clouds import local_net
from skyd.clouds.base import (
    NODE_PENDING,
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    NODE_UNKNOWN,
    Cloud,
    ClusterHandle,
    LogFn,
    NodeHandle,
    PartialHandle,
    Provisioner,
    ProvisionRequest,
)
from skyd.clouds.local_machine import detect_local_gpus, local_max_nodes, memory_gib
from skyd.clouds.local_procs import agents_on, pid_alive
from skyd.clouds.offering import Offering
from skyd.transports import agent_deploy, sandbox_ns
from skyd.transports.agent_deploy import AgentSite
from skyd.transports.base import NodeShell
from skyd.transports.local import LocalTransport

LOCAL = "local"
STOPPED_MARK = "stopped.json"
WORKDIR_DST = "workdir"  # skyd.pipeline.backend.WORKDIR: the job's cwd, under the node dir  # written by the agent on autostop, and by `skyd stop`


class LocalProvisioner(Provisioner):
    """Sandboxes with real agents under ``root`` (default: SKYD_HOME/local)."""

    def __init__(self, root: Path | None = None, *, cloud_name: str = LOCAL) -> None:
        self._root = root
        self.cloud_name = cloud_name

    @property
    def root(self) -> Path:
        return self._root if self._root is not None else paths.sandboxes_dir()

    def cluster_dir(self, cluster: str) -> Path:
        """The cluster's sandbox: a direct child of the root (UnsafePathError for a name that
        is not one plain path component, e.g. a row written before names were checked)."""
        return fsutil.child_dir(self.root, cluster)

    def node_dir(self, cluster: str, rank: int) -> Path:
        return self.cluster_dir(cluster) / f"node-{rank}"

    # -- agents ---------------------------------------------------------------------------

    def _agent_info(self, node_dir: Path) -> dict[str, Any] | None:
        try:
            return dict(json.loads((node_dir / "agent.json").read_text()))
        except (OSError, ValueError):
            return None

    def agent_alive(self, node_dir: Path) -> bool:
        info = self._agent_info(node_dir)
        return bool(info) and pid_alive(int(info["pid"]))  # type: ignore[index]

    async def _start_agent(self, handle_cluster: str, rank: int, node_dir: Path,
                           secret: str, host: str = "127.0.0.1") -> dict[str, Any]:  # fmt: skip
        from skyd.nodeagent import zygote
        from skyd.nodeagent.client import start_agent_detached

        (node_dir / "agent.json").unlink(missing_ok=True)
        (node_dir / STOPPED_MARK).unlink(missing_ok=True)
        # Each job phase runs under the node's wrapper (its mount namespace); rebuilt now, as
        # the host's top-level entries may have changed since the node was made.
        wrapper = await anyio.to_thread.run_sync(sandbox_ns.write, node_dir)
        info = await start_agent_detached(
            node_dir,
            listen=f"{host or '127.0.0.1'}:0",
            cluster_secret=secret,  # fresh agent credentials from it; it stays in the daemon
            rank=rank,
            cluster=handle_cluster,
            extra_args=["--autostop-action", "local-stop"],
            # Jobs inherit the agent's environment: `~` must be the sandbox's home/, so
            # setup/run writing ~/x stay inside SKYD_HOME (as ~/x file mounts do).
            env={**os.environ, "HOME": str(node_dir / "home"), sandbox_ns.ENV: str(wrapper)},
            zygote=zygote.shared(),  # in the daemon: forked from a warm agent
        )
        return dict(info)

    async def _start_container_agent(self, cluster: str, node: NodeHandle, log: LogFn,
                                     secret: str, login: Any = None) -> dict[str, Any]:
        """image_id docker:<img>: make the node's container run (docs/containers.md), then
        the agent zipapp inside it, over ``ContainerTransport``."""
        from skyd.transports import container_runtime as crt
        from skyd.transports.container import ContainerTransport

        nd = Path(node.node_dir)
        spec = crt.ContainerSpec.from_dict(node.extra["container"])
        want = settings.CONTAINER_RUNTIME.get()
        await crt.ensure(LocalTransport(nd), spec, log, creds=login, want=want, label=f"node {node.rank}")
        node.extra["container"] = spec.to_dict()
        t = ContainerTransport(LocalTransport(nd), spec)
        (nd / STOPPED_MARK).unlink(missing_ok=True)
        site = AgentSite(node_dir=str(nd), base=str(self.cluster_dir(cluster)), rank=node.rank,
                         cluster=cluster, listen_host=node.internal_ip or "127.0.0.1")
        info = await agent_deploy.start(t, site, secret, await agent_deploy.agent_zipapp())
        return dict(info)

    async def _container_op(self, handle: ClusterHandle, op: str, log: LogFn) -> None:
        """stop / remove the nodes' containers (image_id docker:<img>)."""
        from skyd.transports import container_runtime as crt

        for node in handle.nodes:
            d = node.extra.get("container")
            if not d:
                continue
            spec = crt.ContainerSpec.from_dict(d)
            t = LocalTransport(node.node_dir if Path(node.node_dir).is_dir() else self.root)
            await (crt.stop(t, spec) if op == "stop" else crt.remove(t, spec))
            log(f"{'Stopped' if op == 'stop' else 'Removed'} container {spec.name}")

    # -- Provisioner ----------------------------------------------------------------------

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        nodes: list[NodeHandle] = []
        from skyd.transports.fuse import unmount_under

        await unmount_under(self.cluster_dir(req.cluster_name), wait=False)  # a killed node's
        addrs = await self._addresses(req.cluster_name, req.num_nodes)
        ok, why = await anyio.to_thread.run_sync(sandbox_ns.probe)
        if not ok:
            log(f"warning: local nodes run without a mount namespace: {why}; jobs will not find"
                " absolute file-mount destinations (e.g. /data) at their paths")
        for rank in range(req.num_nodes):
            node_dir = self.node_dir(req.cluster_name, rank)
            for sub in ("home", "workdir", "root"):
                (node_dir / sub).mkdir(parents=True, exist_ok=True)
            link = node_dir / "home" / "sky_workdir"
            if not link.is_symlink() and not link.exists():
                link.symlink_to(Path("..") / WORKDIR_DST)
            nodes.append(
                NodeHandle(
                    rank=rank,
                    instance_id=f"{req.cluster_name}-{rank}",
                    internal_ip=addrs[rank],
                    node_dir=str(node_dir),
                )
            )

        async def start(node: NodeHandle) -> None:
            nd = Path(node.node_dir)
            if req.container is not None:  # image_id docker:<img>: the agent runs inside
                spec = req.container.spec(
                    rank=node.rank, node_dir=str(nd), home=str(nd / "home"),
                    resolve=lambda dst: str(self._sandbox_path(nd, dst)),
                    extra_binds=[str(self.cluster_dir(req.cluster_name))])
                node.extra["container"] = spec.to_dict()
                info = await self._start_container_agent(req.cluster_name, node, log, req.token,
                                                          login=req.container.login)
            elif self.agent_alive(nd):
                info = self._agent_info(nd) or {}
            else:
                info = await self._start_agent(req.cluster_name, node.rank, nd, req.token,
                                               node.internal_ip)
            node.agent_port = int(info["port"])

        try:
            async with anyio.create_task_group() as tg:
                for node in nodes:
                    tg.start_soon(start, node)
        except BaseExceptionGroup as eg:
            from skyd.transports.agent_deploy import first_error

            raise first_error(eg) from None
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
                # The agent writes the mark, then exits: until its process has gone the node
                # is stopping (a VM's STOPPING), not stopped. It removes its agent.json before
                # the interpreter's own exit, so the process itself is looked for too.
                stopping = self.agent_alive(nd) or bool(
                    await anyio.to_thread.run_sync(agents_on, nd))
                out.append(NODE_PENDING if stopping else NODE_STOPPED)
            elif self.agent_alive(nd):
                out.append(NODE_RUNNING)
            else:
                out.append(NODE_UNKNOWN)
        return out

    def transport(self, node: NodeHandle) -> LocalTransport:
        return LocalTransport(node.node_dir)

    def _site(self, handle: ClusterHandle, rank: int) -> AgentSite:
        """The agent deployer's view of a sandbox (port and socket from its agent.json)."""
        node = handle.nodes[rank]
        info = self._agent_info(Path(node.node_dir)) or {}
        return AgentSite(
            node_dir=node.node_dir,
            base=str(self.cluster_dir(handle.cluster_name)),
            rank=rank,
            cluster=handle.cluster_name,
            listen_host=node.internal_ip or "127.0.0.1",
            port=int(info.get("port") or node.agent_port),
            socket=info.get("socket") or None,
        )

    async def _shutdown_agents(self, handle: ClusterHandle) -> None:
        async def one(node: NodeHandle) -> None:
            nd = Path(node.node_dir)
            info = self._agent_info(nd)
            if not info or not pid_alive(int(info["pid"])):
                return
            site = self._site(handle, node.rank)
            await agent_deploy.request_exit(self.transport(node), site, handle.token, timeout=10)
            pid = int(info["pid"])
            with anyio.move_on_after(5):
                while pid_alive(pid):
                    await anyio.sleep(0.05)
            if pid_alive(pid):
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

        root = self.root.resolve()
        for nd in node_dirs:
            if nd.resolve() == root or not nd.resolve().is_relative_to(root):
                continue  # only this infra's sandboxes
            for pid in await anyio.to_thread.run_sync(agents_on, nd):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if nd.exists():
                await anyio.to_thread.run_sync(kill_recorded_groups, nd)

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        await self._unmount(handle, log)
        await self._shutdown_agents(handle)
        await self._reap_jobs([Path(n.node_dir) for n in handle.nodes if n.node_dir])
        for node in handle.nodes:
            nd = Path(node.node_dir)
            if nd.exists():
                (nd / STOPPED_MARK).write_text(json.dumps({"stopped_at": time.time(), "down": False}))
        await self._container_op(handle, "stop", log)
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
            if node.extra.get("container"):
                info = await self._start_container_agent(handle.cluster_name, node, log, handle.token)
                node.agent_port = int(info["port"])
            elif not self.agent_alive(nd):
                info = await self._start_agent(handle.cluster_name, node.rank, nd, handle.token,
                                               node.internal_ip)
                node.agent_port = int(info["port"])

        async with anyio.create_task_group() as tg:
            for node in handle.nodes:
                tg.start_soon(one, node)
        log(f"Started {len(handle.nodes)} local node(s)")
        return handle

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        await anyio.to_thread.run_sync(sandbox_ns.probe)  # cached: later path lookups never spawn it
        states = await self.query(handle)
        if {NODE_TERMINATED, NODE_STOPPED, NODE_PENDING} & set(states):
            return handle  # gone, stopped, or stopping (autostop): `start` brings it back
        if all(s == NODE_RUNNING for s in states):
            for node in handle.nodes:
                info = self._agent_info(Path(node.node_dir))
                if info:
                    node.agent_port = int(info["port"])
                # the host's entries a mirrored directory shows, as of this launch
                await anyio.to_thread.run_sync(sandbox_ns.write, node.node_dir)

            async def answer(node: NodeHandle) -> None:
                # Running but not answering (hung, or an older version's plaintext agent):
                # a new agent takes its home over (the old one leaves, its jobs are adopted).
                site = self._site(handle, node.rank)
                if not await agent_deploy.healthy(self.transport(node), site, handle.token):
                    log(f"Restarting the node agent of node {node.rank}: it does not answer")
                    if node.extra.get("container"):  # image_id docker:<img>: inside it again
                        info = await self._start_container_agent(handle.cluster_name, node, log,
                                                                 handle.token)
                        node.agent_port = int(info["port"])
                        return
                    info = await self._start_agent(handle.cluster_name, node.rank,
                                                   Path(node.node_dir), handle.token,
                                                   node.internal_ip)  # fmt: skip
                    node.agent_port = int(info["port"])

            async with anyio.create_task_group() as tg:
                for node in handle.nodes:
                    tg.start_soon(answer, node)
            return handle
        log("Restarting node agents that are not running")
        return await self.start(handle, log)

    async def _remove(self, path: Path, log: LogFn) -> None:
        """Delete a sandbox tree, never anything outside the root (nor the root), nor one
        with a FUSE mount still inside (removing it would delete the bucket's objects)."""
        from skyd.transports.fuse import fuse_mounts_under

        root = self.root
        left = await anyio.to_thread.run_sync(fuse_mounts_under, path)
        if left:
            log(f"warning: left {path} in place: still mounted there: {', '.join(left)}"
                f" (fusermount3 -u each, then skyd down again)")
            return
        try:
            if await anyio.to_thread.run_sync(fsutil.safe_rmtree, path, root):
                log(f"Removed {path}")
        except fsutil.UnsafePathError as e:
            log(f"warning: left {path} in place: {e.message}")

    async def _unmount(self, handle: ClusterHandle, log: LogFn) -> None:
        """Bucket mounts (rclone, FUSE) in the sandboxes go first: a tree removed through
        a live mount would delete the bucket's objects."""
        from skyd.transports.fuse import unmount_under

        for node in handle.nodes:
            if node.node_dir:
                await unmount_under(node.node_dir, log)

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        await self._unmount(handle, log)
        await self._shutdown_agents(handle)
        try:
            cdir: Path | None = self.cluster_dir(handle.cluster_name)
        except fsutil.UnsafePathError:
            cdir = None  # a name from before names were checked: remove the node dirs only
        nds = [Path(n.node_dir) for n in handle.nodes if n.node_dir]
        if cdir is not None and cdir.is_dir():
            nds = sorted({*nds, *cdir.glob("node-*")})
        await self._reap_jobs(nds)
        await self._container_op(handle, "remove", log)
        for node in handle.nodes:
            nd = Path(node.node_dir) if node.node_dir else None
            if nd is not None and (cdir is None or nd.parent != cdir):
                await self._remove(nd, log)
        if cdir is not None:
            await self._remove(cdir, log)
        await self._release(handle.cluster_name)

    async def forget(self, partial: PartialHandle) -> None:
        try:
            cdir = self.cluster_dir(partial.cluster_name)
            nds = sorted(cdir.glob("node-*")) if cdir.is_dir() else []
        except (fsutil.UnsafePathError, OSError):
            return  # nothing of ours can be there
        from skyd.transports.fuse import unmount_under

        await unmount_under(cdir, wait=False)
        for nd in nds:
            info = self._agent_info(nd)
            if info and pid_alive(int(info["pid"])):
                try:
                    os.killpg(os.getpgid(int(info["pid"])), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        await self._reap_jobs(nds)
        await _remove_tagged_containers(partial.tag)
        await self._remove(cdir, lambda _m: None)
        await self._release(partial.cluster_name)

    # -- addresses ----------------------------------------------------------------------------

    @property
    def owns_addresses(self) -> bool:
        """Only the ``local`` infra hands out node addresses (a fake cloud built on sandboxes
        stands for VMs whose address it chooses itself)."""
        return self.cloud_name == LOCAL

    async def _addresses(self, cluster: str, n: int) -> list[str]:
        if not self.owns_addresses:
            return ["127.0.0.1"] * n
        return await local_net.allocate(cluster, n)

    async def _release(self, cluster: str) -> None:
        if self.owns_addresses:
            await local_net.release(cluster)

    def _note_dest(self, rank_dir: Path, dst: str, target: Path) -> None:
        """An absolute destination the node's jobs must find at ``dst`` (its namespace)."""
        if dst.startswith("/"):
            sandbox_ns.add_bind(rank_dir, dst, target)

    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        site = self._site(handle, rank)
        return await self.transport(handle.nodes[rank]).agent_endpoint(site.address())

    async def open_ports(self, handle: ClusterHandle, ports: Sequence[str]) -> None:
        """Nodes are processes on this machine: a port they listen on is already open here
        (no firewall is managed)."""

    def node_shell(self, handle: ClusterHandle, rank: int) -> NodeShell:
        nd = Path(handle.nodes[rank].node_dir)
        return NodeShell(self.transport(handle.nodes[rank]), str(nd / ".skyd"), str(nd / "home"),
                         str(nd / "root"), label=f"{handle.cluster_name} node {rank} ({nd})",
                         resolve=lambda dst: self._resolve_noted(handle, rank, dst))

    def _resolve_noted(self, handle: ClusterHandle, rank: int, dst: str) -> Path:
        target = self.remote_path(handle, rank, dst)
        self._note_dest(Path(handle.nodes[rank].node_dir), dst, target)
        return target

    def remote_path(self, handle: ClusterHandle, rank: int, dst: str) -> Path:
        """Where a path on the node lives in its sandbox."""
        return self._sandbox_path(Path(handle.nodes[rank].node_dir), dst)

    @staticmethod
    def _sandbox_path(nd: Path, dst: str) -> Path:
        fsutil.check_dest(dst)
        if dst.startswith("~/") or dst == "~":
            return fsutil.join_confined(nd / "home", dst[2:])
        if dst.startswith("/"):
            return fsutil.join_confined(nd / "root", dst)
        if dst == WORKDIR_DST:
            return nd / dst
        # relative targets are relative to ~, as in SkyPilot; nothing may leave the sandbox
        return fsutil.join_confined(nd / "home", dst)

    async def sync_dir(
        self, handle: ClusterHandle, rank: int, src: str, dst: str, excludes: list[str]
    ) -> tuple[int, int]:
        target = self.remote_path(handle, rank, dst)
        await anyio.to_thread.run_sync(self._note_dest, Path(handle.nodes[rank].node_dir), dst, target)
        source = Path(src)
        if source.is_file():
            def copy_file() -> int:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
                return source.stat().st_size

            return 1, await anyio.to_thread.run_sync(copy_file)
        from skyd.transports.sync import sync_local_dir

        stats = await sync_local_dir(source, target, excludes)
        return stats.files, stats.bytes


async def _remove_tagged_containers(tag: str) -> None:
    """Containers of a cluster whose launch died before its handle was saved (by label)."""
    import shutil as _sh

    if not (_sh.which("podman") or _sh.which("docker")):
        return
    from skyd.transports import container_runtime as crt

    t = LocalTransport("/")
    res = await t.run(crt.FIND_RUNTIME, timeout=30)
    for rt in crt.parse_runtimes(res.stdout):
        await crt.remove_tagged(t, tag, rt)


class LocalCloud(Cloud):
    name = LOCAL
    egress_tiers = ((math.inf, 0.0),)  # this machine
    inter_region_per_gb = None
    minimum_billing_minutes = 0.0
    gpu_ids = ()
    unsupported = frozenset({"spot", "image_id"})  # nodes are sandboxes: no image
    check_ttl_s = 0.0  # nothing to probe

    def __init__(self) -> None:
        self._prov = LocalProvisioner()
        self._offering: Offering | None = None

    async def check(self) -> tuple[bool, str]:
        return True, "always available: nodes are sandboxes on this machine"

    def max_nodes(self) -> int:
        return local_max_nodes()

    def dynamic_offerings(self) -> list[Offering]:
        if self._offering is None:
            acc, count = detect_local_gpus()
            self._offering = Offering(
                cloud=LOCAL,
                instance_type="local",
                accelerator=acc,
                accelerator_count=float(count),
                vcpus=float(os.cpu_count() or 1),
                memory_gib=memory_gib(),
                region="local",
                zone=None,
                price=0.0,
                spot_price=None,
            )
        return [self._offering]

    def provisioner(self) -> Provisioner:
        return self._prov

