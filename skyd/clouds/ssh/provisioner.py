"""SSHProvisioner: clusters on hosts of ``ssh`` node pools (see docs/ssh.md).

provision: allocate N free hosts of the pool (``$SKYD_HOME/ssh/allocations.db``), probe them
(python3 >= 3.8, GPUs), upload the agent zipapp once per version (``~/.skyd/agent-<sha>.pyz``),
write the cluster token over SFTP (0600, never on a command line), start the agent detached
(its own session) and read its port from ``agent.json``. Single node: the agent listens on
127.0.0.1. Multi-node: each agent listens on its host's internal IP (the pool address when it
is a literal IP, else the host's first ``hostname -I`` address) so the head reaches the workers;
every call needs the per-cluster token. The daemon always reaches agents through SSH local
forwards (``agent_endpoint``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import posixpath
import secrets
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from skyd import paths
from skyd.clouds.base import (
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    NODE_UNKNOWN,
    ClusterHandle,
    LogFn,
    NodeHandle,
    PartialHandle,
    Provisioner,
    ProvisionRequest,
)
from skyd.clouds.offering import Offering
from skyd.clouds.ssh import remote
from skyd.clouds.ssh.check import probe_host, python_ok
from skyd.clouds.ssh.pools import Pool, PoolHost, get_pool, load_pools
from skyd.clouds.ssh.state import allocate, allocations, load_host_facts, release, save_host_facts
from skyd.errors import ClusterStateError, ResourcesUnavailableError, SkydError
from skyd.pipeline.ssh_transport import SSHConnectError, SSHTarget, SSHTransport

_ZIPAPP_CACHE: dict[str, tuple[Path, str]] = {}


_ZIPAPP_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.Lock] = weakref.WeakKeyDictionary()


async def agent_zipapp() -> tuple[Path, str]:
    """(path, sha256) of this build's agent zipapp, built once per process under SKYD_HOME.
    Concurrent callers (the nodes of one cluster, the daemon's warm-up) share one build."""
    key = str(paths.home())
    loop = asyncio.get_running_loop()
    lock = _ZIPAPP_LOCKS.setdefault(loop, anyio.Lock())
    async with lock:
        if key in _ZIPAPP_CACHE and _ZIPAPP_CACHE[key][0].exists():
            return _ZIPAPP_CACHE[key]
        from skyd.nodeagent.compat_deps import bundled_zipapp, ensure_compat_deps
        from skyd.nodeagent.zipapp import build_zipapp

        d = paths.home() / "ssh"
        d.mkdir(parents=True, exist_ok=True)
        prebuilt = bundled_zipapp()  # a frozen skyd carries one (no sources to pack)
        if prebuilt is not None:
            import hashlib

            data = await anyio.to_thread.run_sync(prebuilt.read_bytes)
            sha = hashlib.sha256(data).hexdigest()
            final = d / f"agent-{sha}.pyz"
            if not final.exists():
                await anyio.to_thread.run_sync(final.write_bytes, data)
            _ZIPAPP_CACHE[key] = (final, sha)
            return final, sha
        tmp = d / f"agent-build-{os.getpid()}-{secrets.token_hex(4)}.pyz"
        # Nodes with Python 3.8-3.10 run the older dependency set the zipapp also carries.
        compat = await anyio.to_thread.run_sync(ensure_compat_deps, paths.cache_dir())

        def build() -> str:
            return build_zipapp(tmp, compat_dir=compat)

        sha = await anyio.to_thread.run_sync(build)
        final = d / f"agent-{sha}.pyz"
        tmp.replace(final)
        _ZIPAPP_CACHE[key] = (final, sha)
        return final, sha


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
            nodes[rank], facts[rank] = await self._deploy(req.cluster_name, rank, h, len(hosts), token, log)

        try:
            async with anyio.create_task_group() as tg:
                for rank, h in enumerate(hosts):
                    tg.start_soon(one, rank, h)
        except BaseException as exc:
            err = _first_error(exc)
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
        self, cluster: str, rank: int, h: PoolHost, n: int, token: str, log: LogFn
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
        await self._start_agent(t, node, cluster, token)
        log(f"Node {rank} ({h.name}): agent up on port {node.agent_port}")
        return node, facts

    async def _start_agent(self, t: SSHTransport, node: NodeHandle, cluster: str, token: str) -> dict[str, Any]:
        pyz_local, sha = await self._zip()
        base, nd = node.extra["base"], node.node_dir
        pyz = posixpath.join(base, f"agent-{sha}.pyz")
        res = await t.run(
            f"mkdir -p {_q(nd)} && chmod 700 {_q(base)} {_q(nd)} && (test -f {_q(pyz)} && echo have || true)",
            check=True,
            idempotent=True,
        )
        if "have" not in res.stdout:
            sftp = await t.sftp()
            tmp = f"{pyz}.part"
            await sftp.put(str(pyz_local), tmp)
            await sftp.posix_rename(tmp, pyz)
        await t.write_file(posixpath.join(nd, "token"), token.encode(), mode=0o600)
        listen = f"{node.extra['listen_host']}:0"
        out = await t.run(
            ["python3", "-c", remote.ENSURE_AGENT, nd, pyz, sha, listen, str(node.rank), cluster],
            timeout=60,
        )
        if out.exit_status != 0:
            raise ResourcesUnavailableError(
                f"{t.target}: the node agent did not start (exit {out.exit_status}): "
                + out.stderr.strip()[-800:],
                hint=f"see {nd}/agent.log on the host",
            )
        info = dict(json.loads(out.stdout.strip().splitlines()[-1]))
        node.agent_port = int(info["port"])
        node.extra["sha"] = sha
        node.extra["agent_state"] = info.get("state")
        return info

    # -- lifecycle ----------------------------------------------------------------------

    async def _node_states(self, handle: ClusterHandle) -> list[tuple[str, str]]:
        """(NODE_* state, running agent sha or "") per node. A node whose agent is gone
        without having been stopped (crash, kill -9), or whose agent does not answer, is
        NODE_UNKNOWN; one stopped on purpose (stop, autostop) is NODE_STOPPED."""
        out = [(NODE_UNKNOWN, "")] * len(handle.nodes)

        async def one(i: int, node: NodeHandle) -> None:
            t = self._node_transport(node)
            try:
                await t.connection(attempts=1)
                res = await t.run(["python3", "-c", remote.STATUS, node.node_dir], timeout=20, idempotent=True)
            except (SkydError, OSError):
                return  # unreachable: unknown
            word, _, sha = res.stdout.strip().partition(" ")
            if word == "terminated":
                out[i] = (NODE_TERMINATED, "")
            elif word == "stopped":
                out[i] = (NODE_STOPPED, "")
            elif word == "running" and await self._healthy(handle, node):
                out[i] = (NODE_RUNNING, sha)

        async with anyio.create_task_group() as tg:
            for i, node in enumerate(handle.nodes):
                tg.start_soon(one, i, node)
        return out

    async def query(self, handle: ClusterHandle) -> list[str]:
        return [s for s, _ in await self._node_states(handle)]

    async def _healthy(self, handle: ClusterHandle, node: NodeHandle) -> bool:
        try:
            from skyd.nodeagent.client import AgentClient
        except ImportError:  # pragma: no cover - agent package missing
            return True
        try:
            host, port = await self.agent_endpoint(handle, node.rank)
            async with AgentClient(host, port, handle.token) as c:
                return await c.health(timeout=5.0)
        except Exception:  # noqa: BLE001 - any failure means unhealthy
            return False

    async def _shutdown(self, handle: ClusterHandle, node: NodeHandle) -> None:
        """Cancel jobs and exit via the agent, then make sure the process is gone."""
        try:
            from skyd.nodeagent.client import AgentClient

            with anyio.fail_after(15):
                host, port = await self.agent_endpoint(handle, node.rank)
                async with AgentClient(host, port, handle.token) as c:
                    await c.shutdown(exit=True)
        except Exception:  # noqa: BLE001 - fall back to signals
            pass
        t = self._node_transport(node)
        await t.run(["python3", "-c", remote.STOP, node.node_dir], timeout=30, idempotent=True)

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        try:
            async with anyio.create_task_group() as tg:
                for node in handle.nodes:
                    tg.start_soon(self._shutdown, handle, node)
        except BaseExceptionGroup as eg:
            raise _first_error(eg) from None
        log(f"Stopped the agents of {len(handle.nodes)} node(s); the hosts stay allocated")

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        async def one(node: NodeHandle) -> None:
            t = self._node_transport(node)
            info = await self._start_agent(t, node, handle.cluster_name, handle.token)
            if info.get("state") == "upgraded":
                log(f"Node {node.rank}: agent upgraded to {node.extra['sha'][:12]}")

        try:
            async with anyio.create_task_group() as tg:
                for node in handle.nodes:
                    tg.start_soon(one, node)
        except BaseExceptionGroup as eg:
            raise _first_error(eg) from None
        log(f"Started the agents of {len(handle.nodes)} node(s)")
        return handle

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        """Start agents that are down and upgrade ones of another version (same node dir,
        so the job queue survives). Nodes stopped on purpose are left stopped (`start`
        starts them); healthy agents of this version cost one status round trip."""
        states = await self._node_states(handle)
        if any(s == NODE_TERMINATED for s, _ in states):
            raise ClusterStateError(
                f"cluster {handle.cluster_name!r}: a node's files are gone",
                hint=f"skyd down {handle.cluster_name} and launch it again",
            )
        if any(s == NODE_STOPPED for s, _ in states):
            return handle
        _, sha = await self._zip()
        todo = [n for n, (s, have) in zip(handle.nodes, states, strict=True)
                if s != NODE_RUNNING or have != sha]  # fmt: skip
        if not todo:
            return handle

        async def one(node: NodeHandle) -> None:
            info = await self._start_agent(self._node_transport(node), node, handle.cluster_name, handle.token)
            log(f"Node {node.rank}: agent {info.get('state')} on port {node.agent_port}")

        try:
            async with anyio.create_task_group() as tg:
                for node in todo:
                    tg.start_soon(one, node)
        except BaseExceptionGroup as eg:
            raise _first_error(eg) from None
        return handle

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        async def one(node: NodeHandle) -> None:
            try:
                await self._shutdown(handle, node)
                t = self._node_transport(node)
                sha = str(node.extra.get("sha", ""))
                base = str(node.extra.get("base", posixpath.dirname(posixpath.dirname(node.node_dir))))
                await t.run(["python3", "-c", remote.TERMINATE, node.node_dir, base, sha],
                            timeout=60, idempotent=True, check=True)
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
        t = self._node_transport(node)
        host = str(node.extra.get("listen_host") or "127.0.0.1")
        return "127.0.0.1", await t.forward_local(host, node.agent_port)

    def remote_path(self, handle: ClusterHandle, rank: int, dst: str) -> str:
        node = handle.nodes[rank]
        home = str(node.extra.get("home") or "")
        if dst == "~" or dst.startswith("~/"):
            return posixpath.join(home, dst[2:]) if home else dst
        if dst.startswith("/"):
            return dst
        return posixpath.join(node.node_dir, dst)

    async def sync_dir(
        self, handle: ClusterHandle, rank: int, src: str, dst: str, excludes: list[str]
    ) -> tuple[int, int]:
        from skyd.pipeline.sync import sync_to_remote

        t = self._node_transport(handle.nodes[rank])
        stats = await sync_to_remote(t, Path(src), self.remote_path(handle, rank, dst), excludes)
        return stats.files, stats.bytes

    async def forget(self, partial: PartialHandle) -> None:
        """A launch that died before it had a handle: give its reserved hosts back."""
        from skyd.clouds.ssh.state import release, state_dir

        if (state_dir() / "allocations.db").exists():
            await release(partial.cluster_name)

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


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _first_error(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


__all__ = ["SSHProvisioner", "agent_zipapp", "SSHConnectError"]
