"""SlurmProvisioner: a skyd cluster is one sbatch allocation (``--job-name=skyd-<tag>``).

The daemon reaches the cluster's login host over SSH (``~/.slurm/config``). Provisioning
uploads the agent zipapp, the cluster token (for a resumed provisioning) and the allocation's
agent credentials (docs/nodeagent.md "Authentication") to the shared home, submits the batch script
(scripts.py), follows the job through PENDING (the scheduler's reason goes to the launch log)
to RUNNING, then waits for every node's agent.json. Agents listen on their node's
``NodeAddr``; the daemon reaches them through the login host (SSH port forward or the exec
relay). ``down``: shut the agents down, kill what is left on every node with an srun step of
the allocation (no cgroups: ``proctrack/linuxproc`` does not catch daemonized processes),
``scancel``, and wait until the controller no longer runs it.
"""

from __future__ import annotations

import json
import posixpath
import secrets
import shlex
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from skyd.clouds import gpucheck
from skyd.clouds.base import (
    NODE_PENDING,
    NODE_PREEMPTED,
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
from skyd.clouds.slurm import parse, scripts
from skyd.clouds.slurm.config import SlurmCluster, get_cluster, load_clusters, sbatch_options
from skyd.errors import ResourcesUnavailableError, SkydError
from skyd.transports import agent_deploy, agent_scripts
from skyd.transports.agent_deploy import AgentSite, agent_zipapp
from skyd.transports.ssh import SSHTarget, SSHTransport

POLL_S = 0.5
q = shlex.quote


def job_name(tag: str) -> str:
    return f"skyd-{tag}"


class SlurmProvisioner(Provisioner):
    def __init__(self, *, config_path: Path | None = None, connect_timeout: float = 10.0) -> None:
        self.config_path = config_path
        self.connect_timeout = connect_timeout
        self._transports: dict[str, SSHTransport] = {}
        self._zipapp: tuple[Path, str] | None = None
        self.pending_reasons: dict[str, str] = {}  # tag -> the scheduler's reason while pending

    # -- helpers ------------------------------------------------------------------------

    def cluster(self, name: str | None) -> SlurmCluster:
        clusters = load_clusters(self.config_path)
        if not name:
            if not clusters:
                return get_cluster("default", clusters, self.config_path)
            return clusters[sorted(clusters)[0]]
        return get_cluster(name, clusters, self.config_path)

    def transport(self, target: SSHTarget) -> SSHTransport:
        t = self._transports.get(target.key)
        if t is None:
            t = SSHTransport(target, connect_timeout=self.connect_timeout)
            self._transports[target.key] = t
        return t

    def _t(self, d: dict[str, Any]) -> SSHTransport:
        return self.transport(SSHTarget.from_dict(d))

    async def _zip(self) -> tuple[Path, str]:
        if self._zipapp is None:
            self._zipapp = await agent_zipapp()
        return self._zipapp

    async def _home(self, t: SSHTransport) -> str:
        res = await t.run('echo "$HOME"', check=True, idempotent=True, timeout=30)
        return res.stdout.strip() or "."

    async def find_job(self, t: SSHTransport, tag: str) -> tuple[str, str, str] | None:
        """(job id, state, reason) of the live allocation carrying ``tag``, or None."""
        res = await t.run(["squeue", "-h", "--me", "-n", job_name(tag), "-o", "%i|%T|%r"],
                          idempotent=True, timeout=30)  # fmt: skip
        for line in res.stdout.splitlines():
            bits = line.strip().split("|")
            if len(bits) == 3 and bits[0]:
                return bits[0], bits[1], bits[2]
        return None

    async def job_state(self, t: SSHTransport, job_id: str) -> tuple[str | None, str]:
        """(JobState or None when the controller no longer knows it, Reason)."""
        res = await t.run(["scontrol", "show", "job", job_id, "-o"], idempotent=True, timeout=30)
        if res.exit_status != 0:
            return None, ""
        recs = parse.records(res.stdout)
        if not recs:
            return None, ""
        return recs[0].get("JobState"), recs[0].get("Reason", "")

    async def partitions(self, t: SSHTransport) -> list[parse.Partition]:
        res = await t.run("scontrol show partition -o; echo '---'; scontrol show node -o",
                          check=True, idempotent=True, timeout=30)  # fmt: skip
        part, _, node = res.stdout.partition("---")
        return parse.partitions(part, node)

    async def _gres_type(self, t: SSHTransport, partition: str | None, acc: str) -> str | None:
        for p in await self.partitions(t):
            if (partition is None or p.name == partition) and p.accelerator == acc:
                return p.gres_type
        return None

    # -- provision ----------------------------------------------------------------------

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        cl = self.cluster(req.offering.region)
        partition = req.offering.zone
        tag = req.cluster_tag
        t = self.transport(SSHTarget.from_dict(cl.ssh_dict()))
        options = await anyio.to_thread.run_sync(sbatch_options, cl.name)
        token = req.token or secrets.token_urlsafe(32)
        pyz_local, sha = await self._zip()
        home = await self._home(t)
        base = posixpath.join(home, ".skyd")
        jobdir = posixpath.join(base, "slurm", tag)
        pyz = posixpath.join(base, f"agent-{sha}.pyz")
        found = await self.find_job(t, tag)
        if found is None:
            res = await t.run(f"mkdir -p {q(jobdir)} && chmod 700 {q(base)} {q(jobdir)} && "
                              f"(test -f {q(pyz)} && echo have || true)", check=True, idempotent=True)  # fmt: skip
            if "have" not in res.stdout:
                await t.put(pyz_local, pyz)
            await t.write_file(posixpath.join(jobdir, "token"), token.encode(), mode=0o600)
            # the allocation's agent credentials (docs/nodeagent.md "Authentication"): node.sh
            # copies them into every node dir; the token stays here (a found allocation's)
            from skyd.nodeagent.credentials import agent_credentials

            for name, data in (await anyio.to_thread.run_sync(agent_credentials, token)).items():
                await t.write_file(posixpath.join(jobdir, name), data, mode=0o600)
            await t.write_file(posixpath.join(jobdir, "node.sh"), scripts.node_script(
                base=base, tag=tag, cluster=req.cluster_name, pyz=pyz, sha=sha).encode(), mode=0o700)
            gres = None
            off = req.offering
            if off.accelerator and off.accelerator_count:
                typ = await self._gres_type(t, partition, off.accelerator)
                n = int(off.accelerator_count)
                gres = f"gpu:{typ}:{n}" if typ else f"gpu:{n}"
            script = scripts.job_script(tag=tag, num_nodes=req.num_nodes, partition=partition, gres=gres,
                                        cpus=None, options=options, jobdir=jobdir,
                                        nodes_glob=posixpath.join(base, "nodes", tag + "-"))  # fmt: skip
            await t.write_file(posixpath.join(jobdir, "job.sh"), script.encode(), mode=0o700)
            await t.run(["rm", "-f", posixpath.join(jobdir, "release")], idempotent=True, timeout=30)
            res = await t.run(["sbatch", "--parsable", posixpath.join(jobdir, "job.sh")], timeout=60)
            if res.exit_status != 0:
                reason, scope = parse.sbatch_error(res.stderr)
                where = f"slurm/{cl.name}" + (f"/{partition}" if partition else "")
                raise ResourcesUnavailableError(
                    f"{where}: sbatch refused the allocation: {reason}",
                    scope=scope, provider_message=reason,  # type: ignore[arg-type]
                    hint="check the partition, the GPU count per node and slurm.sbatch_options",
                )
            job_id = res.stdout.strip().split(";")[0]
            log(f"Submitted Slurm allocation {job_id} on {cl.name}"
                + (f" (partition {partition})" if partition else ""))  # fmt: skip
        else:
            job_id = found[0]
            log(f"Found Slurm allocation {job_id} of {tag!r} on {cl.name}")
            # its agents check the token the allocation was submitted with
            res = await t.run(["cat", posixpath.join(jobdir, "token")], idempotent=True, timeout=30)
            token = res.stdout.strip() or token
        await self._wait_running(t, tag, job_id, log, req.on_status)
        nodes = await self._wait_agents(t, cl, base, tag, job_id, req.num_nodes, sha)
        for nh in nodes:
            log(f"Node {nh.rank} ({nh.extra['slurm_node']}): agent up on {nh.internal_ip}:{nh.agent_port}")
        off = req.offering
        return ClusterHandle(
            cluster_name=req.cluster_name, cloud="slurm", region=cl.name, zone=partition,
            instance_type=off.instance_type, use_spot=False,
            accelerators={off.accelerator: off.accelerator_count} if off.accelerator else {},
            num_nodes=req.num_nodes, hourly_cost=0.0, nodes=nodes, token=token,
            cpus=off.vcpus or None, memory_gib=off.memory_gib or None,
            extra={"job_id": job_id, "slurm_cluster": cl.name, "base": base, gpucheck.MACHINES: (
                f"Slurm cluster {cl.name}, partition {partition or '(default)'}, node(s) "
                + ", ".join(str(nh.extra["slurm_node"]) for nh in nodes)
                + " (what the driver installed there shows)")},
            tag=tag,
        )

    async def _wait_running(self, t: SSHTransport, tag: str, job_id: str, log: LogFn,
                            on_status: Callable[[str], Awaitable[None]] | None = None) -> None:  # fmt: skip
        last = ""
        try:
            while True:
                state, reason = await self.job_state(t, job_id)
                node_state = parse.job_node_state(state)
                if node_state == NODE_RUNNING:
                    return
                if node_state != NODE_PENDING:
                    raise ResourcesUnavailableError(
                        f"Slurm allocation {job_id} ended before it ran ({state or 'gone'} {reason})".strip(),
                        scope="zone", provider_message=f"{state} {reason}".strip())
                if reason in parse.IMPOSSIBLE_REASONS:
                    with anyio.CancelScope(shield=True):
                        await self._scancel(t, tag, job_id)
                    raise ResourcesUnavailableError(
                        f"Slurm allocation {job_id} can never start: {reason}", scope="zone",
                        provider_message=f"PENDING {reason}",
                        hint="ask for fewer nodes/GPUs or a shorter time, or another partition")
                if reason != last:
                    log(f"Slurm allocation {job_id} is {state}: {reason}")
                    self.pending_reasons[tag] = f"{state} ({reason})"
                    if on_status is not None:
                        await on_status(f"Slurm allocation {job_id} {state}: {reason}")
                    last = reason
                await anyio.sleep(POLL_S)
        finally:
            self.pending_reasons.pop(tag, None)

    async def _wait_agents(self, t: SSHTransport, cl: SlurmCluster, base: str, tag: str, job_id: str,
                           n: int, sha: str) -> list[NodeHandle]:  # fmt: skip
        dirs = [posixpath.join(base, "nodes", f"{tag}-{r}") for r in range(n)]
        read = ("for d in " + " ".join(q(d) for d in dirs) + '; do echo "$(cat "$d/slurm-node" 2>/dev/null)"; '
                'echo "$(cat "$d/agent.json" 2>/dev/null)"; done')  # fmt: skip
        with anyio.fail_after(120):
            while True:
                res = await t.run(read, idempotent=True, timeout=30)
                lines = res.stdout.split("\n")
                pairs = [(lines[2 * i] if 2 * i < len(lines) else "", lines[2 * i + 1] if 2 * i + 1 < len(lines) else "")
                         for i in range(n)]  # fmt: skip
                infos: list[dict[str, Any]] = []
                for _line, js in pairs:
                    try:
                        infos.append(json.loads(js) if js.strip() else {})
                    except ValueError:
                        infos.append({})
                if all(i.get("port") for i in infos):
                    break
                state, reason = await self.job_state(t, job_id)
                if parse.job_node_state(state) != NODE_RUNNING:
                    raise ResourcesUnavailableError(
                        f"Slurm allocation {job_id} ended while its agents started ({state} {reason})",
                        scope="zone", hint=f"see {base}/slurm/{tag}/slurm-{job_id}.out and agent.log")
                await anyio.sleep(POLL_S)
        nodes = []
        for rank, ((node_line, _), info) in enumerate(zip(pairs, infos, strict=True)):
            name, _, addr = node_line.strip().partition(" ")
            nodes.append(NodeHandle(
                rank=rank, instance_id=f"{job_id}/{name}", internal_ip=addr or "127.0.0.1",
                agent_port=int(info["port"]), node_dir=dirs[rank], external_ip=None, ssh=cl.ssh_dict(),
                extra={"base": base, "listen_host": addr or "127.0.0.1", "sha": sha, "slurm_node": name,
                       "job_id": job_id, "agent_socket": info.get("socket") or None,
                       "home": posixpath.dirname(base)},
            ))  # fmt: skip
        return nodes

    # -- lifecycle ----------------------------------------------------------------------

    async def query(self, handle: ClusterHandle) -> list[str]:
        t = self._t(handle.head.ssh or {})
        try:
            state, _ = await self.job_state(t, str(handle.extra.get("job_id")))
        except (SkydError, OSError):
            return [NODE_UNKNOWN] * len(handle.nodes)
        ns = parse.job_node_state(state)
        if ns in (NODE_TERMINATED, NODE_PREEMPTED):
            # stopped on purpose (`stop`, autostop): the agents wrote stopped.json and exited
            res = await t.run(["test", "-f", posixpath.join(handle.head.node_dir, "stopped.json")],
                              idempotent=True, timeout=30)  # fmt: skip
            ns = NODE_STOPPED if res.exit_status == 0 else NODE_PREEMPTED
        if ns != NODE_RUNNING:
            return [ns] * len(handle.nodes)
        out = [NODE_UNKNOWN] * len(handle.nodes)

        async def one(i: int, node: NodeHandle) -> None:
            ok = await agent_deploy.healthy(t, _site(node, handle.cluster_name), handle.token)
            out[i] = NODE_RUNNING if ok else NODE_UNKNOWN

        await agent_deploy.gather([(one, i, n) for i, n in enumerate(handle.nodes)])
        return out

    async def _release(self, t: SSHTransport, handle: ClusterHandle, log: LogFn, *, remove: bool) -> None:
        job_id = str(handle.extra.get("job_id") or "")
        state, _ = await self.job_state(t, job_id) if job_id else (None, "")
        if parse.job_node_state(state) == NODE_RUNNING:
            for node in handle.nodes:
                await agent_deploy.request_exit(t, _site(node, handle.cluster_name), handle.token, timeout=10)
            script = scripts.KILL_NODE if remove else agent_scripts.STOP
            base, tag = str(handle.extra.get("base")), handle.cluster_tag
            # on every node: kill the agent's session and what it started (linuxproc misses
            # processes that daemonized), then (down) remove the node dir
            step = ["srun", f"--jobid={job_id}", "--overlap", f"--nodes={len(handle.nodes)}",
                    "--ntasks-per-node=1", "--export=ALL", "/bin/bash", "-c",
                    'exec python3 -c "$1" "$2/nodes/$3-$SLURM_NODEID" "$2" kill "$4"', "_",
                    script, base, tag, job_id]  # fmt: skip
            with anyio.move_on_after(60):
                await t.run(step, timeout=60)
            await t.run(["touch", posixpath.join(base, "slurm", tag, "release")], idempotent=True, timeout=30)
        await self._scancel(t, handle.cluster_tag, job_id)
        if remove:
            await self._remove_files(t, str(handle.extra.get("base") or ""), handle.cluster_tag, len(handle.nodes))
        log(f"Released Slurm allocation {job_id or '(none)'} of {handle.cluster_name!r}")

    async def _scancel(self, t: SSHTransport, tag: str, job_id: str) -> None:
        await t.run(["scancel", "--me", "-n", job_name(tag)], idempotent=True, timeout=30)
        if job_id:
            await t.run(["scancel", job_id], idempotent=True, timeout=30)
        with anyio.fail_after(60):
            while await self.find_job(t, tag) is not None:
                await anyio.sleep(POLL_S)

    async def _remove_files(self, t: SSHTransport, base: str, tag: str, n: int | None) -> None:
        """Remove the node dirs of ``tag`` (ranks 0..n-1; None: whichever exist) and its job dir."""
        if not base:
            return
        if n is None:
            res = await t.run(["ls", "-1", posixpath.join(base, "nodes")], idempotent=True, timeout=30)
            ranks = [d[len(tag) + 1:] for d in res.stdout.split() if d.startswith(tag + "-")]
            n = 1 + max((int(r) for r in ranks if r.isdigit()), default=-1)
        for r in range(n):
            nd = posixpath.join(base, "nodes", f"{tag}-{r}")
            await t.run([t.python, "-c", scripts.KILL_NODE, nd, base, "rm"], idempotent=True, timeout=60)
        from skyd.fsutil import check_dest

        check_dest(tag)
        await t.run(["rm", "-rf", "--", posixpath.join(base, "slurm", tag)], idempotent=True, timeout=60)

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        """Give the allocation back; the node dirs (job queue, workdir) stay on the shared
        file system for ``start``."""
        t = self._t(handle.head.ssh or {})
        await self._release(t, handle, log, remove=False)

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        from skyd.clouds.offering import Offering

        off = Offering(cloud="slurm", instance_type=handle.instance_type or "",
                       accelerator=next(iter(handle.accelerators), None),
                       accelerator_count=next(iter(handle.accelerators.values()), 0.0),
                       vcpus=handle.cpus or 0.0, memory_gib=handle.memory_gib or 0.0,
                       region=handle.region or "", zone=handle.zone, price=0.0, spot_price=None)  # fmt: skip
        req = ProvisionRequest(handle.cluster_name, handle.num_nodes, off, False, token=handle.token,
                               tag=handle.cluster_tag)  # fmt: skip
        return await self.provision(req, log)

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        t = self._t(handle.head.ssh or {}) if handle.nodes else self.transport(
            SSHTarget.from_dict(self.cluster(handle.region).ssh_dict()))
        await self._release(t, handle, log, remove=True)

    async def forget(self, partial: PartialHandle) -> None:
        """An attempt without a handle: cancel the allocation carrying its tag, remove its files."""
        try:
            cl = self.cluster(partial.region)
        except SkydError:
            return
        t = self.transport(SSHTarget.from_dict(cl.ssh_dict()))
        found = await self.find_job(t, partial.tag)
        await self._scancel(t, partial.tag, found[0] if found else "")
        home = await self._home(t)
        await self._remove_files(t, posixpath.join(home, ".skyd"), partial.tag, None)

    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        node = handle.nodes[rank]
        return await self._t(node.ssh or {}).agent_endpoint(_site(node, handle.cluster_name).address())

    def remote_path(self, handle: ClusterHandle, rank: int, dst: str) -> str:
        from skyd.fsutil import check_dest

        node = handle.nodes[rank]
        home = str(node.extra.get("home") or "")
        check_dest(dst)
        if dst == "~" or dst.startswith("~/"):
            return posixpath.join(home, dst[2:]) if home else dst
        if dst.startswith("/"):
            return dst
        return posixpath.join(node.node_dir, dst)

    async def sync_dir(self, handle: ClusterHandle, rank: int, src: str, dst: str,
                       excludes: list[str]) -> tuple[int, int]:  # fmt: skip
        from skyd.transports.sync import sync_to_remote

        t = self._t(handle.nodes[rank].ssh or {})
        stats = await sync_to_remote(t, Path(src), self.remote_path(handle, rank, dst), excludes)
        return stats.files, stats.bytes

    async def close(self) -> None:
        for t in list(self._transports.values()):
            await t.close()
        self._transports.clear()


def _site(node: NodeHandle, cluster: str) -> AgentSite:
    x = node.extra
    return AgentSite(node_dir=node.node_dir, base=str(x.get("base") or ""), rank=node.rank, cluster=cluster,
                     listen_host=str(x.get("listen_host") or "127.0.0.1"), port=node.agent_port,
                     socket=x.get("agent_socket") or None, sha=str(x.get("sha") or ""))  # fmt: skip


__all__ = ["SlurmProvisioner", "job_name"]
