"""`launch` and `exec`: the stage executor.

Every stage transition is recorded on the request (`ctx.stage`), every cluster change in
SQLite before it is reported. A launch is resumable: if the daemon dies mid-launch, the
restarted daemon re-runs the handler, which finds the cluster row and the submitted job
again (kv `launch:<request id>`), so nothing is provisioned or submitted twice.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from skyd.clouds.base import ClusterHandle, get_cloud
from skyd.errors import ClusterStateError, InvalidSpecError
from skyd.pipeline import clusters_db as cdb
from skyd.pipeline import fit, jobwatch, planner
from skyd.pipeline.backend import AgentBackend
from skyd.pipeline.jobspec import build_job_spec
from skyd.pipeline.locks import cluster_lock
from skyd.pipeline.provision import provision_cluster, provision_placed
from skyd.pipeline.taskload import aload_dag_from_payload, apply_overrides, load_task_from_payload

if TYPE_CHECKING:
    from skyd.models.task import Task
    from skyd.pipeline.launchctx import LaunchContext
    from skyd.pipeline.placement import Resolved


def generate_cluster_name() -> str:
    return f"skyd-{secrets.token_hex(2)}"


async def _provision(ctx: LaunchContext, task: Task, name: str,
                     payload: dict[str, Any]) -> ClusterHandle:
    """OPTIMIZE + PROVISION with failover: skyd.pipeline.provision (the lifecycle)."""
    return await provision_cluster(ctx, task, name, payload)


def check_local_paths(task: Task) -> None:
    """The workdir and every local file-mount source exist: checked before anything is
    provisioned, so a typo never leaves a cluster behind."""
    from pathlib import Path

    if isinstance(task.workdir, str) and task.workdir:  # a git workdir is cloned at sync
        wd = task.workdir
        if not Path(wd).expanduser().is_dir():
            raise InvalidSpecError(
                f"workdir {wd!r} is not a directory", field="workdir",
                hint="fix the path (relative paths are relative to the task YAML)",
            )
    for dst, src in task.local_mounts().items():
        if not Path(src).expanduser().exists():
            raise InvalidSpecError(
                f"local source {src!r} does not exist", field=f"file_mounts.{dst}",
                hint="fix the path (relative paths are relative to the task YAML)",
            )


async def _job_rows(prov: Any, handle: ClusterHandle) -> list[dict[str, Any]]:
    from skyd.pipeline.agents import agent

    async with agent(prov, handle, 0) as c:
        return list(await c.job_queue())


async def _last_job_id(prov: Any, handle: ClusterHandle) -> int:
    """The highest job id on the cluster now (0 for none): written before a submit, so a
    restarted daemon can tell a job its predecessor submitted from older ones."""
    return max((int(j["job_id"]) for j in await _job_rows(prov, handle)), default=0)


async def _submitted_since(prov: Any, handle: ClusterHandle, after: int,
                           name: str) -> int | None:
    """The job named ``name`` submitted after job ``after`` (the one a killed daemon
    submitted), or None when there is none."""
    ids = [int(j["job_id"]) for j in await _job_rows(prov, handle)
           if int(j["job_id"]) > after and j.get("name") == name]
    return min(ids) if ids else None


async def submit_and_follow(
    ctx: LaunchContext, handle: ClusterHandle, task: Task, *, with_setup: bool, detach: bool,
    kv_key: str, after_submit: Callable[[], Awaitable[None]] | None = None,
    resolved: Resolved | None = None,
) -> dict[str, Any]:
    """SETUP + EXEC: submit once (recorded in kv before reporting), then follow.
    ``resolved``: what the placement the cluster was just made for resolved to; a reused
    cluster's is found from the cluster (fit.resolved_on)."""
    store = ctx.store
    prov = get_cloud(handle.cloud).provisioner()
    backend = AgentBackend(prov)
    state = await store.kv_get(kv_key, {})
    job_id = state.get("job_id")
    if job_id is None:
        spec = build_job_spec(task, resolved or fit.resolved_on(task, handle),
                              with_setup=with_setup, name=handle.cluster_name)
        after = state.get("submitting_after")
        if after is not None:
            # A previous daemon submitted and died before it recorded the job's id: adopt
            # that job rather than run the work twice.
            job_id = await _submitted_since(prov, handle, int(after), spec.name)
        if job_id is None:
            after = await _last_job_id(prov, handle)
            await store.kv_set(kv_key, {**state, "submitting_after": after})
            job_id = await backend.execute(handle, spec)
        await store.kv_set(kv_key, {**state, "job_id": job_id})
    await ctx.set_result_partial({"cluster": handle.cluster_name, "cluster_name": handle.cluster_name, "job_id": job_id})
    ctx.emit({"type": "job_submitted", "cluster": handle.cluster_name, "job_id": job_id})
    await cdb.touch(store, handle.cluster_name)
    if after_submit is not None:
        await after_submit()
    return await jobwatch.follow_job(
        ctx, prov, handle, int(job_id), with_setup=with_setup and bool(task.setup), detach=detach
    )


async def run_launch(ctx: LaunchContext, payload: dict[str, Any]) -> dict[str, Any]:
    if payload.get("dryrun"):
        dag = await aload_dag_from_payload(payload)
        dag.tasks = [apply_overrides(t, payload.get("overrides")) for t in dag.tasks]
        from skyd.storage.mounts import plan as bucket_plan

        for t in dag.tasks:
            for w in t.validate():
                ctx.log(f"warning: {w}")
            bucket_plan(t)  # bucket names and modes are checked when planning too
        return await planner.dryrun(dag, minimize=payload.get("minimize", "cost"),
                                    catalog_dir=payload.get("catalog_dir"), store=ctx.store,
                                    cluster_name=payload.get("cluster_name"))
    task = await load_task_from_payload(payload)
    from skyd.pipeline.taskload import tier_warnings

    for w in [*task.validate(), *tier_warnings(task)]:
        ctx.log(f"warning: {w}")
    await anyio.to_thread.run_sync(check_local_paths, task)
    from skyd.storage import mounts as smounts

    buckets = smounts.plan(task)
    await smounts.preflight(buckets)
    store = ctx.store
    kv_key = f"launch:{ctx.request_id}"
    state = await store.kv_get(kv_key, {})
    name = payload.get("cluster_name") or state.get("cluster") or generate_cluster_name()
    if "cluster" not in state:
        await store.kv_set(kv_key, {"cluster": name})
    await ctx.set_result_partial({"cluster": name, "cluster_name": name})
    await smounts.prepare(store, buckets, name, ctx.log)
    async with cluster_lock(name):
        row = await cdb.get_cluster(store, name)
        handle = cdb.handle_of(row) if row else None
        resolved: Resolved | None = None
        if row and handle and row["status"] == cdb.UP:
            fit.check_fits(task, handle)
            await ctx.stage("OPTIMIZE", "skipped", reason=f"reusing cluster {name}")
            await ctx.stage("PROVISION", "skipped", reason=f"cluster {name} is UP")
        elif row and handle and row["status"] == cdb.STOPPED:
            fit.check_fits(task, handle)
            await ctx.stage("PROVISION", "start", target=f"restart {name}")
            prov = get_cloud(handle.cloud).provisioner()
            handle = await prov.start(handle, ctx.log)
            await cdb.save_handle(store, handle, cdb.UP)
            await ctx.stage("PROVISION", "done")
        else:
            handle, placed = await provision_placed(ctx, task, name, payload)
            resolved = placed.resolved(task)
            # the entry the cluster was made for, should this launch be resumed
            state = {**await store.kv_get(kv_key, {}), "resources_index": resolved.index}
            await store.kv_set(kv_key, state)
        if resolved is None and isinstance(state.get("resources_index"), int):
            resolved = fit.resolved_on(task, handle, state["resources_index"])
        prov = get_cloud(handle.cloud).provisioner()
        handle = await prov.ensure_agents(handle, ctx.log)
        backend = AgentBackend(prov)
        if task.workdir:
            await ctx.stage("SYNC_WORKDIR", "start")
            await backend.sync_workdir(handle, fit.workdir_path(task), ctx.log)
            await ctx.stage("SYNC_WORKDIR", "done")
        else:
            await ctx.stage("SYNC_WORKDIR", "skipped")
        mounts = task.local_mounts()
        if mounts or buckets:
            await ctx.stage("SYNC_FILE_MOUNTS", "start")
            if mounts:
                await backend.sync_file_mounts(handle, mounts, ctx.log)
            if buckets:
                from skyd import paths

                staging = paths.home() / "storage-staging" / ctx.request_id
                await smounts.copy_to_nodes(prov, handle, buckets, staging, ctx.log)
            await ctx.stage("SYNC_FILE_MOUNTS", "done")
        else:
            await ctx.stage("SYNC_FILE_MOUNTS", "skipped")
    idle = payload.get("idle_minutes")
    down = bool(payload.get("down"))
    detach = bool(payload.get("detach_run"))
    # `--down` alone on a followed launch: the DOWN stage below tears down once the job is
    # done. Autostop goes to the agent only after the job is submitted (an idle-0 agent
    # would otherwise stop before the job arrives), and for a followed launch only after
    # the job ended (else the agent exits under the log stream).
    down_now = down and idle is None and task.autostop_setting() is None and not detach
    want_autostop = not down_now and (
        idle is not None or down or task.autostop_setting() is not None
    )

    async def autostop() -> None:
        await apply_autostop(ctx, handle, idle, down, task)

    with_setup = not payload.get("no_setup")
    result = await submit_and_follow(
        ctx, handle, task, with_setup=with_setup, detach=detach, kv_key=kv_key,
        after_submit=autostop if want_autostop and detach else None, resolved=resolved,
    )
    if want_autostop and not detach:
        await autostop()
    if down_now:
        from skyd.pipeline.lifecycle import down_cluster

        await ctx.stage("DOWN", "start")
        await down_cluster(ctx, name)
        await ctx.stage("DOWN", "done")
    return result


async def apply_autostop(
    ctx: LaunchContext, handle: ClusterHandle, idle: float | None, down: bool,
    task: Task | None = None
) -> None:
    from skyd.pipeline.agents import agent

    if idle is None and task is not None:
        auto = task.autostop_setting()
        if auto is not None:
            idle, down = auto
    if idle is None:
        idle = 0 if down else 5  # SkyPilot: --down alone tears down right after the jobs
    prov = get_cloud(handle.cloud).provisioner()
    async with agent(prov, handle, 0) as c:
        await c.set_autostop(float(idle), down)
    await cdb.set_autostop(ctx.store, handle.cluster_name, float(idle), down)
    ctx.log(f"Autostop: {'down' if down else 'stop'} after {idle} idle minute(s)")


async def run_exec(ctx: LaunchContext, payload: dict[str, Any]) -> dict[str, Any]:
    name = payload["cluster_name"]
    store = ctx.store
    row = await cdb.require_cluster(store, name)
    handle = cdb.handle_of(row)
    from skyd.pipeline.lifecycle import agent_may_be_dead, answering_agents

    # UP, or marked unhealthy by the refresher (its agent died): answering_agents restarts it
    if handle is None or not agent_may_be_dead(row):
        raise ClusterStateError(
            f"cluster {name!r} is {row['status']}", hint=f"`skyd start {name}` first"
        )
    task = await load_task_from_payload(payload)
    fit.check_fits(task, handle, mounts=False)
    await anyio.to_thread.run_sync(check_local_paths, task)
    # A dead agent (or a stranger on its old port: the TLS handshake fails) is restarted
    # on a new port before anything is sent to it.
    row, handle, note = await answering_agents(store, name, row, handle)
    if note:
        ctx.log(note)
    prov = get_cloud(handle.cloud).provisioner()
    backend = AgentBackend(prov)
    if task.workdir:
        await ctx.stage("SYNC_WORKDIR", "start")
        await backend.sync_workdir(handle, fit.workdir_path(task), ctx.log)
        await ctx.stage("SYNC_WORKDIR", "done")
    return await submit_and_follow(
        ctx, handle, task, with_setup=False, detach=bool(payload.get("detach_run")),
        kv_key=f"exec:{ctx.request_id}",
    )
