"""Daemon plugin: the managed-jobs verbs and reads (listed in skyd.daemon.plugins).

- verb ``jobs.launch``  {yaml | command, env, base_dir, yaml_path, name, job_recovery,
  priority, retry_until_up} → {"job_id"}: creates the row and spawns the controller.
- verb ``jobs.cancel``  {ids | name | all} → {"cancelled": [ids]}.
- read ``GET /v1/jobs`` (?skip_finished=1&status=S…) → rows as JSON.
- read ``GET /v1/jobs/{id}`` → the row plus its attempts.
- read ``GET /v1/jobs/{id}/logs`` (?follow=0&controller=1) → ndjson {"text": …} lines.

At daemon start `resume_all` brings back every unfinished managed job. The ClusterOps is the
pipeline's (skyd.jobs.pipeline_ops); with ``SKYD_JOBS_SIM=1`` the in-process simulation is
used (tests, demos).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skyd import settings
from skyd.daemon.http import text_chunks
from skyd.daemon.registry import on_shutdown, on_startup, register_read, register_verb
from skyd.errors import InvalidSpecError, NotFoundError, SkydError
from skyd.jobs import schema as _schema  # noqa: F401 - registers the tables
from skyd.jobs.controller import JobsConfig
from skyd.jobs.manager import JobsManager, current_manager, resume_all
from skyd.jobs.ops import ClusterOps
from skyd.jobs.status import TERMINAL

if TYPE_CHECKING:
    from aiohttp import web

    from skyd.daemon.context import ReadContext, RequestContext
    from skyd.daemon.host import Host

def _config() -> JobsConfig:
    from skyd import paths

    cfg = JobsConfig(log_dir=paths.logs_dir() / "jobs")
    cfg.log_dir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
    backoff, poll = settings.JOBS_BACKOFF.get(), settings.JOBS_POLL.get()
    if backoff is not None:
        cfg.backoff_initial = backoff
    if poll is not None:
        cfg.poll_interval = poll
        cfg.user_failure_grace = min(cfg.user_failure_grace, cfg.poll_interval)
    return cfg


async def _startup(daemon: Host) -> None:
    from skyd import paths
    from skyd.jobs.state import JobsDB, set_publisher

    set_publisher(daemon.bus.publish)

    if settings.JOBS_SIM.get():
        from skyd.jobs.sim import SimClusterOps

        ops: ClusterOps = SimClusterOps(
            state_file=paths.home() / "jobs-sim.json",
            default_duration=settings.JOBS_SIM_DURATION.get(),
        )
    else:
        from skyd.jobs.pipeline_ops import PipelineClusterOps

        ops = PipelineClusterOps(daemon.store)
    db = JobsDB(daemon.store)  # the daemon's one store (the jobs component's tables)
    from skyd.jobs import job_secrets

    await job_secrets.sweep(db)  # files of jobs that ended (or were never created)
    await resume_all(db, ops, daemon.spawn, _config())


async def _shutdown(daemon: Host) -> None:
    """Stop the controllers (the store itself is the daemon's to close)."""
    try:
        m = current_manager()
    except RuntimeError:
        return
    await m.stop()
    from skyd.jobs.logfile import CONTROLLER_LOG

    await anyio.to_thread.run_sync(CONTROLLER_LOG.flush)  # the controllers' last lines


def _started() -> bool:
    try:
        current_manager()
    except RuntimeError:
        return False
    return True


def require_manager() -> JobsManager:
    try:
        return current_manager()
    except RuntimeError:
        raise SkydError(
            "managed jobs are not available: no cluster launcher is wired into this daemon",
            hint="set SKYD_JOBS_SIM=1 for the simulation, or use a build with the pipeline",
        ) from None


async def jobs_launch(ctx: RequestContext, payload: dict[str, Any]) -> dict[str, Any]:
    """Submit a managed job (a multi-document YAML is a pipeline). Resumable: the job id
    is recorded under the request id with the row, so a resumed request finds it again."""
    from skyd.jobs import job_secrets

    if ctx.resumed:  # requests resume before the managed-jobs service is back up
        with anyio.move_on_after(30):
            while not _started():
                await anyio.sleep(0.05)
    m = require_manager()
    docs, per_task = await anyio.to_thread.run_sync(_load_docs, payload)  # YAML parsing
    pool = payload.get("pool") or None
    n = int(payload.get("num_jobs") or 1)
    if pool:
        await m.pools.require(str(pool))  # an unknown pool: nothing is submitted
    ids: list[int] = []
    for i in range(n):
        ref = await job_secrets.save(per_task)  # 0600 file before the row; the dag names it
        # SkyPilot's --num-jobs: each job knows its rank and the count.
        envs = {"SKYPILOT_JOB_RANK": str(i), "SKYPILOT_NUM_JOBS": str(n)} if n > 1 else None
        try:
            job_id = await m.submit(
                docs,
                name=payload.get("name"),
                envs=envs,  # the task's own envs were substituted by the loader
                job_recovery=payload.get("job_recovery"),
                priority=int(payload.get("priority") or 0),
                retry_until_up=bool(payload.get("retry_until_up")),
                secrets_ref=ref,
                catalog_dir=payload.get("catalog_dir") or None,
                request_key=f"jobs.launch:{ctx.request_id}" + (f":{i}" if i else ""),
                pool=str(pool) if pool else None,
            )
        except BaseException:
            with anyio.CancelScope(shield=True):
                await job_secrets.drop(ref)
            raise
        ids.append(job_id)
        ctx.log(f"Managed job {job_id} submitted" + (f" to pool {pool}" if pool else ""))
    return {"job_id": ids[0], "job_ids": ids}


async def check_jobs_launch(payload: dict[str, Any]) -> None:
    """Submit-time check: the job's name (``-n``, else the YAML's), numbers, the task."""
    from skyd import bounds
    from skyd.names import check_optional_name

    check_optional_name(payload.get("name"), kind="managed job", field="name")
    bounds.check(payload.get("priority"), "priority")
    bounds.check(payload.get("num_jobs"), "num_jobs")
    jr = payload.get("job_recovery")
    if jr is not None and not (isinstance(jr, str) and 0 < len(jr) <= 64):
        raise InvalidSpecError(f"job_recovery must be a strategy name, got {str(jr)[:40]!r}",
                               field="job_recovery", hint="e.g. EAGER_NEXT_REGION or FAILOVER")
    for key in ("retry_until_up", "detach_run"):
        if payload.get(key) is not None and not isinstance(payload[key], bool):
            raise InvalidSpecError(f"{key} must be true or false", field=key)
    if payload.get("pool") is not None:
        check_optional_name(payload["pool"], kind="pool", field="pool")
    cat = payload.get("catalog_dir")
    if cat is not None and not (isinstance(cat, str) and await anyio.Path(cat).is_dir()):
        raise InvalidSpecError(f"SKYD_CATALOG_DIR {cat!r} is not a directory",
                               field="SKYD_CATALOG_DIR",
                               hint="point it at a folder of <cloud>.csv files, or unset it")
    docs = await anyio.to_thread.run_sync(_check_docs, payload)
    if not payload.get("name"):
        first = docs[0] if docs else {}
        check_optional_name(first.get("name"), kind="managed job", field="name")


async def check_jobs_cancel(payload: dict[str, Any]) -> None:
    from skyd.daemon.http import MAX_ID, number

    ids = payload.get("ids")
    if ids is not None and not isinstance(ids, list):
        raise InvalidSpecError("ids must be a list of managed job ids", field="ids")
    for i in ids or []:
        number(i, "ids", lo=0, hi=MAX_ID, integer=True)
    if payload.get("name") is not None and not isinstance(payload["name"], str):
        raise InvalidSpecError("name must be a string", field="name")


def _check_docs(payload: dict[str, Any]) -> list[dict[str, Any]]:
    from skyd.pipeline.checks import capacity
    from skyd.pipeline.taskload import load_dag_with_overrides

    dag = load_dag_with_overrides(payload)
    capacity(list(dag.tasks))
    return _docs_of(dag)


def _load_docs(payload: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Validate through skyd.models (same code as `skyd validate`): the normalized task
    dicts to store (secret values redacted) and, per task, the secret values; a bare
    command becomes {run: command}."""
    from skyd.pipeline.taskload import load_dag_with_overrides

    dag = load_dag_with_overrides(payload)
    docs = _docs_of(dag)
    per_task = [{k: v for k, v in t.secrets.items() if v is not None} for t in dag.tasks]
    return docs, per_task


def _docs_of(dag: Any) -> list[dict[str, Any]]:
    if getattr(dag, "is_job_group", False):
        raise InvalidSpecError(
            "this YAML is a job group (execution: parallel): its tasks must run at once, "
            "which managed jobs do not do yet", field="execution",
            hint="use execution: serial (or drop the header) to run the tasks one after another")
    docs: list[dict[str, Any]] = [t.to_normalized() for t in dag.tasks]
    if len(docs) > 1 and getattr(dag, "name", None):
        docs = [{"name": dag.name}, *docs]
    return docs


async def jobs_cancel(ctx: RequestContext, payload: dict[str, Any]) -> dict[str, Any]:
    """Cancel managed jobs by id, by name, or all."""
    ids = [int(i) for i in payload.get("ids") or []]
    moved = await require_manager().cancel(
        ids=ids or None, name=payload.get("name"), all_jobs=bool(payload.get("all"))
    )
    ctx.log(f"Cancelling managed job(s) {moved}" if moved else "No active job matched")
    return {"cancelled": moved}


def _flag(v: str | None) -> bool:
    return (v or "").lower() in ("1", "true", "yes", "on")


async def jobs_queue(ctx: ReadContext, request: web.Request) -> Any:
    """Managed jobs, newest first."""
    statuses = request.query.getall("status", []) or None
    return await require_manager().queue(skip_finished=_flag(request.query.get("skip_finished")),
                                  statuses=statuses)  # fmt: skip


def _job_id(request: web.Request) -> int:
    try:
        jid = int(request.match_info["id"])
    except ValueError:
        raise InvalidSpecError("a managed job id is a number", field="id") from None
    if not 0 <= jid < 2**63:
        raise InvalidSpecError(f"no managed job id is {jid}", field="id")
    return jid


async def jobs_get(ctx: ReadContext, request: web.Request) -> Any:
    """One managed job with its attempts."""
    m = require_manager()
    jid = _job_id(request)
    row = await m.db.get_job(jid)
    if row is None:
        raise NotFoundError(f"no managed job {jid}", hint="see `skyd jobs queue`")
    row.pop("dag", None)
    row["attempts"] = await m.db.attempts(jid)
    return row


async def jobs_logs(ctx: ReadContext, request: web.Request) -> Any:
    """The job's output (or the controller's log with ?controller=1), as ndjson."""
    m = require_manager()
    jid = _job_id(request)
    row = await m.db.get_job(jid)
    if row is None:
        raise NotFoundError(f"no managed job {jid}", hint="see `skyd jobs queue`")
    follow = request.query.get("follow", "1") != "0"

    async def lines() -> AsyncIterator[dict[str, str]]:
        if _flag(request.query.get("controller")):
            log_dir = m.config.log_dir
            p = Path(log_dir) / f"{jid}.log" if log_dir else None
            any_text = False
            if p is not None:
                from skyd.jobs.logfile import CONTROLLER_LOG

                await anyio.to_thread.run_sync(CONTROLLER_LOG.flush)
                async for text in text_chunks(p):
                    any_text = True
                    yield {"text": text}
            if not any_text:
                yield {"text": ""}
            return
        announced = False
        streamed: set[tuple[str, int, int, int]] = set()
        while True:
            cur = await m.db.get_job(jid)
            assert cur is not None
            terminal = str(cur["status"]) in TERMINAL
            # One stream per attempt: a recovery may reuse the cluster name and job id 1.
            key = (str(cur["cluster"]), int(cur["cluster_job_id"] or 0),
                   int(cur["recoveries"] or 0), int(cur["restarts"] or 0))
            if cur["cluster"] and cur["cluster_job_id"] is not None and not terminal \
                    and key not in streamed:
                streamed.add(key)
                got = False
                try:
                    async for chunk in m.ops.tail_logs(cur["cluster"], int(cur["cluster_job_id"]), follow):
                        got = True
                        yield {"text": chunk.decode(errors="replace")}
                except Exception:  # noqa: BLE001 - cluster went away (preempted / done)
                    pass
                if not got:  # nothing came (the job ended and its cluster is going): the
                    streamed.discard(key)  # saved log shows it once the job is terminal
                if not follow:
                    return
                cur = await m.db.get_job(jid)
                assert cur is not None
                if str(cur["status"]) not in TERMINAL:
                    await anyio.sleep(0.5)  # recovering: the next attempt's log follows
                    continue
                terminal = True
            if terminal:
                if not streamed:
                    saved = await anyio.to_thread.run_sync(_saved_logs, jid)
                    for f in saved:
                        async for text in text_chunks(f):
                            yield {"text": text}
                    if not saved:  # a pool job: its output stays on the worker
                        async for text in _worker_log(m, jid):
                            yield {"text": text}
                yield {"text": f"managed job {jid} {cur['status']}\n"}
                return
            if not follow:
                yield {"text": f"managed job {jid} is {cur['status']}: no running cluster job\n"}
                return
            if not announced:
                yield {"text": f"managed job {jid} is {cur['status']}; waiting for its cluster...\n"}
                announced = True
            await anyio.sleep(0.5)

    return await ctx.stream_ndjson(request, lines())


async def _worker_log(m: JobsManager, jid: int) -> AsyncIterator[str]:
    """A finished job's output from the pool worker it ran on (while the worker is up)."""
    atts = await m.db.attempts(jid)
    if not atts or not atts[-1]["cluster"] or atts[-1]["cluster_job_id"] is None:
        return
    if not await m.pools.is_worker(str(atts[-1]["cluster"])):
        return
    try:
        async for chunk in m.ops.tail_logs(str(atts[-1]["cluster"]), int(atts[-1]["cluster_job_id"]), False):
            yield chunk.decode(errors="replace")
    except Exception:  # noqa: BLE001 - the worker went away
        return


def _saved_logs(jid: int) -> list[Path]:
    from skyd.jobs.pipeline_ops import saved_logs_dir

    d = saved_logs_dir()
    return sorted(d.glob(f"skyd-jobs-{jid}-*.log")) if d.exists() else []


register_verb("jobs.launch", jobs_launch, resumable=True, check=check_jobs_launch)
register_verb("jobs.cancel", jobs_cancel, check=check_jobs_cancel)
register_read("GET", "/v1/jobs", jobs_queue)
register_read("GET", "/v1/jobs/{id}", jobs_get)
register_read("GET", "/v1/jobs/{id}/logs", jobs_logs)
on_startup(_startup)
on_shutdown(_shutdown)
