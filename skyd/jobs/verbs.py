"""Daemon plugin: the managed-jobs verbs and reads (listed in skyd.daemon.plugins).

- verb ``jobs.launch``  {yaml | command, env, base_dir, yaml_path, name, job_recovery,
  priority, retry_until_up} → {"job_id"}: creates the row and spawns the controller.
- verb ``jobs.cancel``  {ids | name | all} → {"cancelled": [ids]}.
- read ``GET /v1/jobs`` (?skip_finished=1&status=S…) → rows as JSON.
- read ``GET /v1/jobs/{id}`` → the row plus its attempts.
- read ``GET /v1/jobs/{id}/logs`` (?follow=0&controller=1) → ndjson {"text": …} lines.

At daemon start `resume_all` brings back every unfinished managed job. The ClusterOps comes
from `register_cluster_ops(factory)` (the pipeline registers its implementation); with
``SKYD_JOBS_SIM=1`` the in-process simulation is used (tests, demos).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skyd.daemon.registry import on_shutdown, on_startup, register_read, register_verb
from skyd.errors import InvalidSpecError, NotFoundError, SkydError
from skyd.jobs.controller import JobsConfig
from skyd.jobs.manager import JobsManager, current_manager, resume_all
from skyd.jobs.ops import ClusterOps
from skyd.jobs.status import TERMINAL

if TYPE_CHECKING:
    from aiohttp import web

    from skyd.daemon.app import Daemon
    from skyd.daemon.context import ReadContext, RequestContext

_FACTORY: list[Callable[[Daemon], ClusterOps]] = []


def register_cluster_ops(factory: Callable[[Daemon], ClusterOps]) -> None:
    """The pipeline plugs its ClusterOps in here (called with the daemon at start)."""
    _FACTORY[:] = [factory]


def _config() -> JobsConfig:
    from skyd import paths

    cfg = JobsConfig(log_dir=paths.logs_dir() / "jobs")
    cfg.log_dir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
    if os.environ.get("SKYD_JOBS_BACKOFF"):
        cfg.backoff_initial = float(os.environ["SKYD_JOBS_BACKOFF"])
    if os.environ.get("SKYD_JOBS_POLL"):
        cfg.poll_interval = float(os.environ["SKYD_JOBS_POLL"])
        cfg.user_failure_grace = min(cfg.user_failure_grace, cfg.poll_interval)
    return cfg


async def _startup(daemon: Daemon) -> None:
    from skyd import paths
    from skyd.jobs.state import JobsDB, set_publisher

    set_publisher(daemon.bus.publish)

    if os.environ.get("SKYD_JOBS_SIM") == "1":
        from skyd.jobs.sim import SimClusterOps

        ops: ClusterOps = SimClusterOps(
            state_file=paths.home() / "jobs-sim.json",
            default_duration=float(os.environ.get("SKYD_JOBS_SIM_DURATION") or 1.0),
        )
    elif _FACTORY:
        ops = _FACTORY[0](daemon)
    else:
        from skyd.jobs.pipeline_ops import PipelineClusterOps

        ops = PipelineClusterOps(daemon.store)
    # Own connection, sharing the store's write lock (one writer at a time in this process).
    db = await JobsDB.open(paths.db_path(), lock=daemon.store.write_lock)
    await resume_all(db, ops, daemon.spawn, _config())


async def _shutdown(daemon: Daemon) -> None:
    """Close our connection (its worker thread would otherwise keep the process alive)."""
    try:
        m = current_manager()
    except RuntimeError:
        return
    await m.stop()


def _started() -> bool:
    try:
        current_manager()
    except RuntimeError:
        return False
    return True


def _manager() -> JobsManager:
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
    if ctx.resumed:  # requests resume before the managed-jobs service is back up
        with anyio.move_on_after(30):
            while not _started():
                await anyio.sleep(0.05)
    m = _manager()
    docs = _load_docs(payload)
    job_id = await m.submit(
        docs,
        name=payload.get("name"),
        envs=None,  # already substituted by the loader
        job_recovery=payload.get("job_recovery"),
        priority=int(payload.get("priority") or 0),
        retry_until_up=bool(payload.get("retry_until_up")),
        request_key=f"jobs.launch:{ctx.request_id}",
    )
    ctx.log(f"Managed job {job_id} submitted")
    return {"job_id": job_id}


def _load_docs(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Validate through skyd.models (same code as `skyd validate`) and store the normalized
    task dicts; a bare command becomes {run: command}."""
    from skyd.pipeline.taskload import load_dag_from_payload

    dag = load_dag_from_payload(payload)
    docs: list[dict[str, Any]] = [t.to_normalized(redact_secrets=False) for t in dag.tasks]
    if len(docs) > 1 and getattr(dag, "name", None):
        docs = [{"name": dag.name}, *docs]
    return docs


async def jobs_cancel(ctx: RequestContext, payload: dict[str, Any]) -> dict[str, Any]:
    """Cancel managed jobs by id, by name, or all."""
    ids = [int(i) for i in payload.get("ids") or []]
    moved = await _manager().cancel(
        ids=ids or None, name=payload.get("name"), all_jobs=bool(payload.get("all"))
    )
    ctx.log(f"Cancelling managed job(s) {moved}" if moved else "No active job matched")
    return {"cancelled": moved}


def _flag(v: str | None) -> bool:
    return (v or "").lower() in ("1", "true", "yes", "on")


async def jobs_queue(ctx: ReadContext, request: web.Request) -> Any:
    """Managed jobs, newest first."""
    statuses = request.query.getall("status", []) or None
    return await _manager().queue(skip_finished=_flag(request.query.get("skip_finished")),
                                  statuses=statuses)  # fmt: skip


def _job_id(request: web.Request) -> int:
    try:
        return int(request.match_info["id"])
    except ValueError:
        raise InvalidSpecError("a managed job id is a number", field="id") from None


async def jobs_get(ctx: ReadContext, request: web.Request) -> Any:
    """One managed job with its attempts."""
    m = _manager()
    jid = _job_id(request)
    row = await m.db.get_job(jid)
    if row is None:
        raise NotFoundError(f"no managed job {jid}", hint="see `skyd jobs queue`")
    row.pop("dag", None)
    row["attempts"] = await m.db.attempts(jid)
    return row


async def jobs_logs(ctx: ReadContext, request: web.Request) -> Any:
    """The job's output (or the controller's log with ?controller=1), as ndjson."""
    m = _manager()
    jid = _job_id(request)
    row = await m.db.get_job(jid)
    if row is None:
        raise NotFoundError(f"no managed job {jid}", hint="see `skyd jobs queue`")
    follow = request.query.get("follow", "1") != "0"

    async def lines() -> AsyncIterator[dict[str, str]]:
        if _flag(request.query.get("controller")):
            log_dir = m.config.log_dir
            p = Path(log_dir) / f"{jid}.log" if log_dir else None
            yield {"text": p.read_text() if p and p.exists() else ""}
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
                try:
                    async for chunk in m.ops.tail_logs(cur["cluster"], int(cur["cluster_job_id"]), follow):
                        yield {"text": chunk.decode(errors="replace")}
                except Exception:  # noqa: BLE001 - cluster went away (preempted / done)
                    pass
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
                    for f in _saved_logs(jid):
                        yield {"text": f.read_text(errors="replace")}
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


def _saved_logs(jid: int) -> list[Path]:
    from skyd.jobs.pipeline_ops import saved_logs_dir

    d = saved_logs_dir()
    return sorted(d.glob(f"skyd-jobs-{jid}-*.log")) if d.exists() else []


register_verb("jobs.launch", jobs_launch, resumable=True)
register_verb("jobs.cancel", jobs_cancel)
register_read("GET", "/v1/jobs", jobs_queue)
register_read("GET", "/v1/jobs/{id}", jobs_get)
register_read("GET", "/v1/jobs/{id}/logs", jobs_logs)
on_startup(_startup)
on_shutdown(_shutdown)
