"""The Backend contract: the stages a task goes through on a cluster, and the one
implementation over a Provisioner plus node agents.

Stages: OPTIMIZE (solver, in planner.py) → PROVISION → SYNC_WORKDIR →
SYNC_FILE_MOUNTS → SETUP → EXEC → DOWN. `setup` and `execute` are two phases of one agent
job (JobStatus SETTING_UP then RUNNING), so a job id is allocated once per `launch`/`exec`,
as SkyPilot users expect; the executor reports the SETUP stage from the job's status.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import anyio

from skyd.clouds.base import ClusterHandle, LogFn, Provisioner, ProvisionRequest
from skyd.errors import InvalidSpecError
from skyd.nodeagent.spec import JobSpec, NodeRef
from skyd.pipeline.agents import agent

WORKDIR = "workdir"  # relative to the node dir: the job's cwd (SkyPilot: ~/sky_workdir)


class Backend(ABC):
    @abstractmethod
    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle: ...

    @abstractmethod
    async def sync_workdir(self, handle: ClusterHandle, workdir: str, log: LogFn) -> None: ...

    @abstractmethod
    async def sync_file_mounts(
        self, handle: ClusterHandle, mounts: dict[str, Any], log: LogFn
    ) -> None: ...

    @abstractmethod
    async def execute(self, handle: ClusterHandle, spec: JobSpec) -> int:
        """Submit the job (setup phase first when `spec.setup`); returns its id."""

    @abstractmethod
    async def teardown(self, handle: ClusterHandle, log: LogFn, *, terminate: bool) -> None: ...


class AgentBackend(Backend):
    def __init__(self, prov: Provisioner) -> None:
        self.prov = prov

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        return await self.prov.provision(req, log)

    async def _each_node(self, handle: ClusterHandle, fn: Any) -> list[Any]:
        results: list[Any] = [None] * len(handle.nodes)

        async def run(rank: int) -> None:
            results[rank] = await fn(rank)

        async with anyio.create_task_group() as tg:
            for rank in range(len(handle.nodes)):
                tg.start_soon(run, rank)
        return results

    async def sync_workdir(self, handle: ClusterHandle, workdir: str, log: LogFn) -> None:
        from skyd.transports.sync import load_excludes

        src = Path(workdir).expanduser()
        if not src.is_dir():
            raise InvalidSpecError(
                f"workdir {workdir!r} is not a directory", field="workdir", hint="fix the path"
            )
        excludes = load_excludes(src)
        t0 = time.monotonic()
        stats = await self._each_node(
            handle, lambda r: self.prov.sync_dir(handle, r, str(src) + "/", WORKDIR, excludes)
        )
        files = sum(s[0] for s in stats)
        size = sum(s[1] for s in stats)
        log(
            f"Synced workdir {src} to {len(handle.nodes)} node(s): {files} files,"
            f" {size / 1e6:.1f} MB in {time.monotonic() - t0:.2f}s"
        )

    async def sync_file_mounts(
        self, handle: ClusterHandle, mounts: dict[str, Any], log: LogFn
    ) -> None:
        for dst, src in mounts.items():
            path = Path(str(src)).expanduser()
            if not path.exists():
                raise InvalidSpecError(
                    f"local source {str(src)!r} does not exist",
                    field=f"file_mounts.{dst}",
                    hint="fix the path (relative paths are relative to the task YAML)",
                )
            excludes: list[str] = []
            if path.is_dir():
                from skyd.transports.sync import load_excludes

                excludes = load_excludes(path)
            s = str(path) + ("/" if path.is_dir() else "")
            stats = await self._each_node(
                handle, lambda r, s=s, dst=dst, ex=excludes: self.prov.sync_dir(handle, r, s, dst, ex)
            )
            log(f"Mounted {src} -> {dst} ({stats[0][0]} files, {stats[0][1] / 1e6:.1f} MB)")

    async def execute(self, handle: ClusterHandle, spec: JobSpec) -> int:
        """The job spec (skyd.pipeline.jobspec) gets the cluster's nodes, the submitting
        user and the cluster info; the agent client turns it into the wire message."""
        nodes = []
        for node in handle.nodes:
            # Workers are reached by the head over the cluster's private addresses (on
            # `local`, each node's own loopback address: skyd.clouds.local_net).
            host, port = node.internal_ip or "127.0.0.1", node.agent_port
            nodes.append(NodeRef(rank=node.rank, address=f"{host}:{port}",
                                 internal_ip=node.internal_ip or ""))
        info = {"cluster_name": handle.cluster_name, "cloud": handle.cloud,
                "region": handle.region, "zone": handle.zone}
        spec = dataclasses.replace(
            spec, nodes=nodes, num_nodes=len(handle.nodes),
            username=spec.username or getpass.getuser(),
            cluster_info=spec.cluster_info or json.dumps(info))
        async with agent(self.prov, handle, 0) as c:
            return int(await c.submit_job(spec))

    async def teardown(self, handle: ClusterHandle, log: LogFn, *, terminate: bool) -> None:
        if terminate:
            await self.prov.terminate(handle, log)
        else:
            await self.prov.stop(handle, log)
