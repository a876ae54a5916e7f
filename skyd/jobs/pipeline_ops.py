"""The daemon's ClusterOps: managed jobs launched through the pipeline on real node agents.

Each launch reuses the pipeline's OPTIMIZE/PROVISION (ranked plans, failover, blocked
locations) and submits the task to the head agent with the managed job's stable envs
(SKYPILOT_TASK_ID, SKYPILOT_MANAGED_JOB_ID, ...).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skyd import paths
from skyd.clouds.base import (
    NODE_PREEMPTED,
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    get_cloud,
)
from skyd.jobs.ops import Block, JobInfo, LaunchResult, LogFn, TaskSpec
from skyd.pipeline import clusters_db as cdb
from skyd.pipeline.agents import agent, agent_healthy
from skyd.pipeline.locks import cluster_lock

if TYPE_CHECKING:
    from skyd.pipeline.launchctx import LaunchContext


class _Ctx:
    """Just enough of a RequestContext for the pipeline's provisioning code."""

    def __init__(self, store: Any, log: LogFn, request_id: str) -> None:
        self.store = store
        self.log = log
        self.request_id = request_id

    async def stage(self, name: str, state: str, **info: Any) -> None:
        if state in ("start", "failed"):
            extra = f" ({info['target']})" if info.get("target") else ""
            self.log(f"{name.lower()} {state}{extra}")

    def emit(self, event: dict[str, Any]) -> None:
        return None

    async def set_result_partial(self, data: dict[str, Any]) -> None:
        return None


def _task_of(spec: TaskSpec) -> Any:
    from skyd.models import Task

    # A recovery's pin (spec.pin) is a location the planner produced, not something a user
    # wrote: it filters the plan's choices (see _provision_blocked) rather than being
    # spelled back as an `infra:` string, which not every infra's syntax can express.
    return Task.from_normalized(spec.task)


def saved_logs_dir() -> Path:
    return paths.logs_dir() / "managed"


def saved_log(cluster_name: str) -> Path:
    """Where a managed job's cluster logs are kept after its cluster is gone (all attempts)."""
    return saved_logs_dir() / f"{cluster_name}.log"


class PipelineClusterOps:
    def __init__(self, store: Any) -> None:
        self.store = store

    async def _handle(self, name: str) -> tuple[dict[str, Any] | None, Any]:
        row = await cdb.get_cluster(self.store, name)
        return row, (cdb.handle_of(row) if row else None)

    async def launch(
        self, task: TaskSpec, cluster_name: str, *, blocked: Sequence[Block], log: LogFn
    ) -> LaunchResult:
        from skyd.jobs.job_secrets import with_secrets
        from skyd.pipeline import fit, planner
        from skyd.pipeline.backend import AgentBackend
        from skyd.pipeline.jobspec import build_job_spec
        from skyd.pipeline.launch import check_local_paths
        from skyd.pipeline.provision import provision_placed

        t = await with_secrets(_task_of(task), task)
        await anyio.to_thread.run_sync(check_local_paths, t)
        from skyd.storage import mounts as smounts

        buckets = smounts.plan(t)
        await smounts.preflight(buckets)
        ctx = _Ctx(self.store, log, f"job{task.job_id}-{task.task_index}-{task.attempt}")
        await smounts.prepare(self.store, buckets, cluster_name, log)
        async with cluster_lock(cluster_name):
            row, handle = await self._handle(cluster_name)
            resolved = None
            prov = get_cloud(handle.cloud).provisioner() if handle else None
            if not (row and handle and prov and row["status"] == cdb.UP
                    and await agent_healthy(prov, handle)):
                if row is not None:
                    await self.teardown_locked(cluster_name)
                blocks = [planner.Block(cloud=b.cloud or "", region=b.region, zone=b.zone)
                          for b in blocked if b.cloud]
                handle, placed = await _provision_blocked(
                    ctx, t, cluster_name, blocks, provision_placed, pin=task.pin,
                    catalog_dir=task.catalog_dir)
                resolved = placed.resolved(t)
                prov = get_cloud(handle.cloud).provisioner()
            backend = AgentBackend(prov)
            if t.workdir:
                await backend.sync_workdir(handle, fit.workdir_path(t), log)
            mounts = t.local_mounts()
            if mounts:
                await backend.sync_file_mounts(handle, mounts, log)
            if buckets:
                from skyd import paths

                staging = paths.home() / "storage-staging" / ctx.request_id
                await smounts.copy_to_nodes(prov, handle, buckets, staging, log)
            spec = build_job_spec(t, resolved or fit.resolved_on(t, handle), with_setup=True,
                                  name=cluster_name, extra_envs=task.envs)
            job_id = await backend.execute(handle, spec)
        return LaunchResult(job_id=job_id, cloud=handle.cloud, region=handle.region,
                            zone=handle.zone)

    async def job_status(self, cluster_name: str, job_id: int) -> JobInfo | None:
        row, handle = await self._handle(cluster_name)
        if handle is None:
            return None
        prov = get_cloud(handle.cloud).provisioner()
        try:
            with anyio.fail_after(5):
                async with agent(prov, handle) as c:
                    for j in await c.job_queue(job_ids=[job_id]):
                        if int(j["job_id"]) == job_id:
                            await cdb.upsert_jobs(self.store, cluster_name, [j])
                            return JobInfo(status=j["status"], exit_code=j.get("exit_code"))
        except Exception:  # noqa: BLE001 - unreachable agent: the controller asks the cloud
            return None
        return None

    async def cluster_status(self, cluster_name: str) -> str:
        row, handle = await self._handle(cluster_name)
        if row is None or handle is None:
            return "TERMINATED"
        prov = get_cloud(handle.cloud).provisioner()
        states = await prov.query(handle)
        if any(s == NODE_PREEMPTED for s in states):
            return "PREEMPTED"
        if all(s == NODE_TERMINATED for s in states):
            return "TERMINATED"
        if any(s == NODE_STOPPED for s in states):
            return "STOPPED"
        if all(s == NODE_RUNNING for s in states) and await agent_healthy(prov, handle):
            return "UP"
        return "INIT"

    async def cancel_job(self, cluster_name: str, job_id: int) -> None:
        row, handle = await self._handle(cluster_name)
        if handle is None:
            return
        try:
            with anyio.fail_after(15):
                async with agent(get_cloud(handle.cloud).provisioner(), handle) as c:
                    await c.cancel_jobs([job_id])
        except Exception:  # noqa: BLE001 - teardown follows and kills it anyway
            pass

    async def teardown(self, cluster_name: str) -> None:
        async with cluster_lock(cluster_name):
            await self.teardown_locked(cluster_name)

    async def _save_logs(self, cluster_name: str, handle: Any) -> None:
        """Keep the cluster's job logs before it goes (SkyPilot's controller downloads them)."""
        prov = get_cloud(handle.cloud).provisioner()
        try:
            with anyio.fail_after(30):
                async with agent(prov, handle) as c:
                    jobs = sorted(int(j["job_id"]) for j in await c.job_queue())
                    chunks: list[bytes] = []
                    for jid in jobs:
                        header = f"=== {cluster_name} job {jid} ({handle.cloud}/{handle.region}) ===\n"
                        chunks.append(header.encode())
                        async for chunk in c.tail_logs(jid, follow=False):
                            chunks.append(chunk)
        except Exception:  # noqa: BLE001 - agent gone (preempted): nothing to save
            return
        path = saved_log(cluster_name)

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as f:
                f.writelines(chunks)

        await anyio.to_thread.run_sync(write)

    async def teardown_locked(self, cluster_name: str) -> None:
        row, handle = await self._handle(cluster_name)
        if row is None:
            return
        if handle is not None:
            await self._save_logs(cluster_name, handle)
            await get_cloud(handle.cloud).provisioner().terminate(handle, lambda _: None)
        elif (partial := cdb.partial_of(row)) is not None:  # a half-made attempt: its cloud
            from skyd.pipeline.provision import forget  # removes what carries its tag

            await forget(self.store, partial, lambda _: None)
        await cdb.remove_cluster(self.store, cluster_name)

    async def tail_logs(self, cluster_name: str, job_id: int, follow: bool) -> AsyncIterator[bytes]:
        row, handle = await self._handle(cluster_name)
        if handle is None:
            return
        async with agent(get_cloud(handle.cloud).provisioner(), handle) as c:
            async for chunk in c.tail_logs(job_id, follow=follow):
                yield chunk


async def _provision_blocked(
    ctx: LaunchContext, task: Any, name: str, blocks: list[Any], provision: Any,
    pin: Block | None = None,
    catalog_dir: str | None = None,
) -> Any:
    """The pipeline's OPTIMIZE+PROVISION, starting from the controller's blocked locations
    and staying inside `pin` (cloud / region / zone; None parts mean any)."""
    payload: dict[str, Any] = {"blocked": blocks, "catalog_dir": catalog_dir}
    if pin is not None and pin.cloud:
        payload["pin"] = {"cloud": pin.cloud, "region": pin.region, "zone": pin.zone}
    return await provision(ctx, task, name, payload)
