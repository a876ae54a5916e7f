"""SSHProvisioner: clusters on hosts of ``ssh`` node pools (see docs/ssh.md).

What is pool-specific lives here: allocate N free hosts of the pool
(``$SKYD_HOME/ssh/allocations.db``), probe them (python3 >= 3.8, GPUs), release them on
terminate. The agent itself is deployed, health-checked, upgraded and stopped over each
host's SSHTransport by skyd.transports.agent_deploy (zipapp at ``~/.skyd/agent-<sha>.pyz``,
token over SFTP, agent detached in its own session). Single node: the agent listens on
127.0.0.1. Multi-node: each agent listens on its host's internal IP (the pool address when it
is a literal IP, else the host's first ``hostname -I`` address) so the head reaches the workers;
every call needs the per-cluster token. The daemon reaches agents through the transport
(``agent_endpoint``): an SSH port forward, or an exec relay where the host refuses forwarding.
"""

from __future__ import annotations

import ipaddress
import posixpath
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from skyd.clouds.base import (
    NODE_UNKNOWN,
    ClusterHandle,
    LogFn,
    NodeHandle,
    PartialHandle,
    Provisioner,
    ProvisionRequest,
)
from skyd.clouds.offering import Offering
from skyd.clouds.ssh.check import probe_host, python_ok
from skyd.clouds.ssh.pools import Pool, PoolHost, get_pool, load_pools
from skyd.clouds.ssh.state import allocate, allocations, load_host_facts, release, save_host_facts
from skyd.errors import ResourcesUnavailableError, SkydError
from skyd.transports import agent_deploy, container
from skyd.transports.agent_deploy import AgentSite, agent_zipapp, first_error
from skyd.transports.ssh import SSHTarget, SSHTransport


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return False


class SSHProvisioner(Provisioner):
    def __init__(
        self, *, pools_path: Path | None = None, zipapp: tuple[Path, str] | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.pools_path = pools_path
        self._zipapp = zipapp
        self.connect_timeout = connect_timeout
        self._transports: dict[str, SSHTransport] = {}

    # -- helpers ------------------------------------------------------------------------

    def transport(self, target: SSHTarget) -> SSHTransport:
        t = self._transports.get(target.key)
        if t is None:
            t = SSHTransport(target, connect_timeout=self.connect_timeout)
            self._transports[target.key] = t
        return t

    def _node_transport(self, node: NodeHandle) -> SSHTransport:
        assert node.ssh is not None, "not an ssh node"
        return self.transport(SSHTarget.from_dict(node.ssh))

    async def _zip(self) -> tuple[Path, str]:
        if self._zipapp is None:
            self._zipapp = await agent_zipapp()
        return self._zipapp

    def _pool(self, name: str | None) -> Pool:
        pools = load_pools(self.pools_path)
        if name:
            return get_pool(name, pools)
        if not pools:
            return get_pool("default", pools)  # raises with the file path in the hint
        return pools[sorted(pools)[0]]

    # -- provision ----------------------------------------------------------------------

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        pool = self._pool(req.offering.region)
        order = _candidates(pool, req.offering, load_host_facts())
        try:
            keys = await allocate(pool.name, req.cluster_name, [h.key for h in order], req.num_nodes)
        except ResourcesUnavailableError as e:
            # Every host of the pool was already considered: another plan choice in the same
            # pool cannot do better, so the user gets this error (pool + fix) as is.
            e.no_failover = True
            if req.offering.accelerator and len(order) < len(pool.hosts):
                e.message += f" with {req.offering.accelerator}:{req.offering.accelerator_count:g}"
            raise
        by_key = {h.key: h for h in pool.hosts}
        hosts = [by_key[k] for k in keys]
        token = req.token or secrets.token_urlsafe(32)
        log(f"Allocated {', '.join(h.name for h in hosts)} from SSH pool {pool.name!r}")
        nodes: list[NodeHandle | None] = [None] * len(hosts)
        facts: list[dict[str, Any]] = [{} for _ in hosts]

        async def one(rank: int, h: PoolHost) -> None:
            nodes[rank], facts[rank] = await self._deploy(req.cluster_name, rank, h, len(hosts), token, log,
                                                          req=req)

        try:
            async with anyio.create_task_group() as tg:
                for rank, h in enumerate(hosts):
                    tg.start_soon(one, rank, h)
        except BaseException as exc:
            err = first_error(exc)
            partial = [n for n in nodes if n is not None]
            with anyio.CancelScope(shield=True):
                await self._cleanup(partial, req.cluster_name, token)
                await release(req.cluster_name)
            if isinstance(err, ResourcesUnavailableError):
                err.no_failover = True
                raise err from None
            if isinstance(err, SkydError):
                raise ResourcesUnavailableError(err.message, hint=err.hint, no_failover=True) from None
            raise err from None
        head = facts[0]
        acc = head.get("accelerator")
        return ClusterHandle(
            cluster_name=req.cluster_name,
            cloud="ssh",
            region=pool.name,
            zone=None,
            instance_type=hosts[0].name,
            use_spot=False,
            accelerators={acc: float(head.get("accelerator_count") or 0)} if acc else {},
            num_nodes=len(hosts),
            hourly_cost=0.0,
            nodes=[n for n in nodes if n is not None],
            token=token,
            cpus=float(head.get("cpus") or 0) or None,
            memory_gib=float(head.get("memory_gib") or 0) or None,
        )

    async def _deploy(
        self, cluster: str, rank: int, h: PoolHost, n: int, token: str, log: LogFn,
        req: ProvisionRequest | None = None,
    ) -> tuple[NodeHandle, dict[str, Any]]:
        t = self.transport(h.target())
        facts = await probe_host(t)
        await save_host_facts({h.key: facts})
        if not python_ok(facts.get("python")):
            found = facts.get("python") or "none"
            raise ResourcesUnavailableError(
                f"{h.name} (pool {h.pool}): python3 >= 3.8 is needed for the node agent, found {found}",
                hint=f"install python3 on {h.name}, or remove it from the pool",
            )
        home = facts["home"] or "."
        base = posixpath.join(home, ".skyd")
        internal = h.ip if _is_ip(h.ip) else (facts["ips"][0] if facts.get("ips") else h.ip)
        node = NodeHandle(
            rank=rank,
            instance_id=h.key,
            internal_ip=internal,
            node_dir=posixpath.join(base, "nodes", f"{cluster}-{rank}"),
            external_ip=h.ip,
            ssh=h.ssh_dict() | {"pool": h.pool},
            extra={"home": home, "base": base, "listen_host": "127.0.0.1" if n == 1 else internal},
        )
        await self._start_agent(t, node, cluster, token, log, req=req)
        log(f"Node {rank} ({h.name}): agent up on port {node.agent_port}")
        return node, facts

    async def _start_agent(self, t: SSHTransport, node: NodeHandle, cluster: str, token: str,
                           log: LogFn = lambda _m: None, req: ProvisionRequest | None = None) -> dict[str, Any]:
        site = agent_site(node, cluster)
        at = await container.prepare(
            t, node.extra, rank=node.rank, node_dir=node.node_dir, home=str(node.extra.get("home") or ""),
            log=log, request=req.container if req is not None else None, label=f"node {node.rank}")
        info = await agent_deploy.start(at, site, token, await self._zip())
        node_record(node, site, info)
        return info

    # -- lifecycle ----------------------------------------------------------------------

    async def query(self, handle: ClusterHandle) -> list[str]:
        async def one(node: NodeHandle) -> str:
            t = self._node_transport(node)
            try:
                await t.connection(attempts=1)
            except (SkydError, OSError):
                return NODE_UNKNOWN
            state, _ = await agent_deploy.node_state(t, agent_site(node, handle.cluster_name), handle.token)
            return state

        out = [NODE_UNKNOWN] * len(handle.nodes)

        async def put(i: int, node: NodeHandle) -> None:
            out[i] = await one(node)

        await agent_deploy.gather([(put, i, n) for i, n in enumerate(handle.nodes)])
        return out

    async def _shutdown(self, handle: ClusterHandle, node: NodeHandle) -> None:
        """Cancel jobs and exit via the agent, then make sure the process is gone."""
        await agent_deploy.shutdown(self._node_transport(node), agent_site(node, handle.cluster_name), handle.token)

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        await self._unmount(handle, log)
        try:
            async with anyio.create_task_group() as tg:
                for node in handle.nodes:
                    tg.start_soon(self._shutdown, handle, node)
        except BaseExceptionGroup as eg:
            raise first_error(eg) from None
        for node in handle.nodes:
            await container.node_op(self._node_transport(node), node.extra, "stop")
        log(f"Stopped the agents of {len(handle.nodes)} node(s); the hosts stay allocated")

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        async def one(node: NodeHandle) -> None:
            t = self._node_transport(node)
            info = await self._start_agent(t, node, handle.cluster_name, handle.token, log)
            if info.get("state") == "upgraded":
                log(f"Node {node.rank}: agent upgraded to {node.extra['sha'][:12]}")

        try:
            async with anyio.create_task_group() as tg:
                for node in handle.nodes:
                    tg.start_soon(one, node)
        except BaseExceptionGroup as eg:
            raise first_error(eg) from None
        log(f"Started the agents of {len(handle.nodes)} node(s)")
        return handle

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        """Start agents that are down and upgrade ones of another version (same node dir,
        so the job queue survives). Nodes stopped on purpose are left stopped (`start`
        starts them); healthy agents of this version cost one status round trip."""
        pairs = [(container.wrap(self._node_transport(n), n.extra), agent_site(n, handle.cluster_name))
                 for n in handle.nodes]
        await agent_deploy.ensure(pairs, handle.token, await self._zip(), log, cluster=handle.cluster_name)
        for node, (_, site) in zip(handle.nodes, pairs, strict=True):
            node_record(node, site, None)
        return handle

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        await self._unmount(handle, log)

        async def one(node: NodeHandle) -> None:
            try:
                t = self._node_transport(node)
                await agent_deploy.remove(t, agent_site(node, handle.cluster_name), handle.token)
                await container.node_op(t, node.extra, "remove")
                await t.close()
                self._transports.pop(t.target.key, None)
            except (SkydError, OSError) as e:
                log(f"warning: could not clean node {node.rank} ({node.external_ip}): {e}")

        async with anyio.create_task_group() as tg:
            for node in handle.nodes:
                tg.start_soon(one, node)
        released = await release(handle.cluster_name)
        log(f"Released {len(released)} host(s) of cluster {handle.cluster_name!r}")

    async def _cleanup(self, nodes: list[NodeHandle], cluster: str, token: str) -> None:
        if not nodes:
            return
        fake = ClusterHandle(cluster, "ssh", None, None, None, False, {}, len(nodes), 0.0, nodes, token)
        with anyio.move_on_after(60):
            await self.terminate(fake, lambda _m: None)

    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        node = handle.nodes[rank]
        return await self._node_transport(node).agent_endpoint(agent_site(node, handle.cluster_name).address())

    def node_shell(self, handle: ClusterHandle, rank: int) -> Any:
        from skyd.transports.base import NodeShell

        node = handle.nodes[rank]
        home = str(node.extra.get("home") or "")
        if not home.startswith("/"):
            return None  # an old handle without the node's home: '~/x' cannot be resolved
        t = self._node_transport(node)
        return NodeShell(t, posixpath.join(node.node_dir, "storage"), home,
                         label=f"{handle.cluster_name} node {rank} ({t.target.key})",
                         resolve=lambda dst: self.remote_path(handle, rank, dst))

    async def _unmount(self, handle: ClusterHandle, log: LogFn) -> None:
        """Bucket mounts go before the agent and its directories do."""
        from skyd.transports.fuse import unmount_node

        async def one(rank: int) -> None:
            sh = self.node_shell(handle, rank)
            if sh is None:
                return
            try:
                await unmount_node(sh, log)
            except (SkydError, OSError) as e:
                log(f"warning: could not unmount buckets on node {rank}: {e}")

        async with anyio.create_task_group() as tg:
            for rank in range(len(handle.nodes)):
                tg.start_soon(one, rank)

    def remote_path(self, handle: ClusterHandle, rank: int, dst: str) -> str:
        from skyd.fsutil import check_dest

        node = handle.nodes[rank]
        home = str(node.extra.get("home") or "")
        check_dest(dst)  # a destination may not climb out of where it is put with '..'
        if dst == "~" or dst.startswith("~/"):
            return posixpath.join(home, dst[2:]) if home else dst
        if dst.startswith("/"):
            return dst
        return posixpath.join(node.node_dir, dst)

    async def sync_dir(
        self, handle: ClusterHandle, rank: int, src: str, dst: str, excludes: list[str]
    ) -> tuple[int, int]:
        from skyd.transports.sync import sync_to_remote

        t = self._node_transport(handle.nodes[rank])
        stats = await sync_to_remote(t, Path(src), self.remote_path(handle, rank, dst), excludes)
        return stats.files, stats.bytes

    async def forget(self, partial: PartialHandle) -> None:
        """A launch that died before it had a handle: remove the containers it may have
        started (image_id docker:, found by their cluster-tag label), then give its reserved
        hosts back."""
        from skyd.clouds.ssh.state import release, state_dir

        if (state_dir() / "allocations.db").exists():
            mine = [k for k, c in (await allocations()).items() if c == partial.cluster_name]
            if mine:
                await self._forget_containers(mine, partial.tag)
            await release(partial.cluster_name)

    async def _forget_containers(self, keys: list[str], tag: str) -> None:
        from skyd.transports import container_runtime as crt

        hosts = {h.key: h for p in load_pools(self.pools_path).values() for h in p.hosts}

        async def one(h: PoolHost) -> None:
            with anyio.move_on_after(30):
                try:
                    t = self.transport(h.target())
                    res = await t.run(crt.FIND_RUNTIME, timeout=20, idempotent=True)
                    for rt in crt.parse_runtimes(res.stdout):
                        await crt.remove_tagged(t, tag, rt)
                except (SkydError, OSError):
                    pass  # unreachable: nothing more can be done from here

        async with anyio.create_task_group() as tg:
            for k in keys:
                if k in hosts:
                    tg.start_soon(one, hosts[k])

    async def close(self) -> None:
        for t in list(self._transports.values()):
            await t.close()
        self._transports.clear()

    async def in_use(self) -> dict[str, str]:
        return await allocations()

    async def open_ports(self, handle: ClusterHandle, ports: Sequence[str]) -> None:
        """Pool hosts are existing machines: skyd manages no firewall there, so their ports
        are as reachable as the host's own network makes them."""


def _candidates(pool: Pool, off: Offering, facts: dict[str, dict[str, Any]]) -> list[PoolHost]:
    """Hosts of ``pool`` that can serve ``off``, the chosen host first: with an accelerator,
    only hosts whose probed facts have at least that many of it."""
    first = pool.host(off.instance_type) if off.instance_type else None
    order = ([first] if first else []) + [h for h in pool.hosts if h is not first]
    if not off.accelerator:
        return order

    def fits(h: PoolHost) -> bool:
        f = facts.get(h.key, {})
        return bool(f.get("accelerator") == off.accelerator
                    and float(f.get("accelerator_count") or 0) >= off.accelerator_count)

    return [h for h in order if fits(h)]


def agent_site(node: NodeHandle, cluster: str) -> AgentSite:
    """The deployer's view of an ssh node (its agent fields live in NodeHandle.extra)."""
    x = node.extra
    return AgentSite(
        node_dir=node.node_dir,
        base=str(x.get("base") or posixpath.dirname(posixpath.dirname(node.node_dir))),
        rank=node.rank,
        cluster=cluster,
        listen_host=str(x.get("listen_host") or "127.0.0.1"),
        port=node.agent_port,
        socket=x.get("agent_socket") or None,
        sha=str(x.get("sha") or ""),
    )


def node_record(node: NodeHandle, site: AgentSite, info: dict[str, Any] | None) -> None:
    node.agent_port = site.port
    if site.sha:
        node.extra["sha"] = site.sha
    if site.socket:
        node.extra["agent_socket"] = site.socket
    if info is not None:
        node.extra["agent_state"] = info.get("state")


__all__ = ["SSHProvisioner"]
