"""Daemon plugin: managed-job worker pools (listed in skyd.daemon.plugins).

- verb ``jobs.pool_apply`` {yaml, yaml_path, base_dir, env, name, workers} → {"workers": [..]}:
  creates or resizes the pool and waits for its workers (skyd.jobs.pools).
- verb ``jobs.pool_down`` {names | all} → {"down": [names]}: cancels the pools' jobs and
  tears their workers down.
- read ``GET /v1/pools`` (?name=N) → [{name, workers, status, worker rows + cluster status}].
- read ``GET /v1/pools/{name}/logs`` (?worker=I…) → ndjson {"text"}: each worker's setup log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from skyd.daemon.registry import register_read, register_verb
from skyd.errors import InvalidSpecError, NotFoundError
from skyd.jobs import schema as _schema  # noqa: F401 - registers the tables
from skyd.jobs.pools import worker_name
from skyd.jobs.verbs import require_manager

if TYPE_CHECKING:
    from aiohttp import web

    from skyd.daemon.context import ReadContext, RequestContext


def _load_task(payload: dict[str, Any]) -> dict[str, Any]:
    from skyd.pipeline.taskload import load_dag_from_payload

    dag = load_dag_from_payload(payload)
    if len(dag.tasks) != 1:
        raise InvalidSpecError("a pool YAML is one task (resources, setup, file_mounts)",
                               field="pool", hint="drop the other documents")  # fmt: skip
    from skyd.pipeline.checks import capacity

    capacity(list(dag.tasks))  # num_nodes per worker against what the infras can hold
    task: dict[str, Any] = dag.tasks[0].to_normalized()
    return task


def _workers(payload: dict[str, Any], task: dict[str, Any]) -> int:
    w = payload.get("workers")
    if w is None:
        w = (task.get("pool") or {}).get("workers")
    if w is None:
        raise InvalidSpecError("how many workers?", field="pool.workers",
                               hint="set pool: {workers: N} in the YAML or pass --workers N")  # fmt: skip
    from skyd import bounds

    field = "workers" if payload.get("workers") is not None else "pool.workers"
    return int(bounds.check(w, "workers", field) or 0)


async def check_pool_apply(payload: dict[str, Any]) -> None:
    from skyd.names import check_name

    name = check_name(payload.get("name"), kind="pool", field="pool")
    task = await anyio.to_thread.run_sync(_load_task, payload)
    n = _workers(payload, task)
    check_name(worker_name(name, max(n - 1, 0)), kind="pool worker cluster", field="pool")


async def check_pool_down(payload: dict[str, Any]) -> None:
    names = payload.get("names")
    if names is not None and (not isinstance(names, list)
                              or not all(isinstance(n, str) and n for n in names)):
        raise InvalidSpecError("names must be a list of pool names", field="names",
                               hint="skyd jobs pool down NAME | -a")  # fmt: skip
    if payload.get("all") is not None and not isinstance(payload["all"], bool):
        raise InvalidSpecError("all must be true or false", field="all")


async def pool_apply(ctx: RequestContext, payload: dict[str, Any]) -> dict[str, Any]:
    m = require_manager()
    name = str(payload["name"])
    task = await anyio.to_thread.run_sync(_load_task, payload)
    workers = await m.pools.apply(name, task, _workers(payload, task), ctx.log)
    rows = await m.pools.workers(name)
    failed = [w for w in rows if w["status"] == "FAILED"]
    if failed:
        ctx.log("failed worker(s): " + ", ".join(f"{w['cluster']} ({w['reason']})" for w in failed))
    return {"pool": name, "workers": workers}


async def pool_down(ctx: RequestContext, payload: dict[str, Any]) -> dict[str, Any]:
    m = require_manager()
    names = [str(n) for n in payload.get("names") or []]
    if payload.get("all"):
        names = [p["name"] for p in await m.pools.pools()]
    elif not names:
        raise InvalidSpecError("say which pool to take down", field="pool",
                               hint="skyd jobs pool down NAME | -a")  # fmt: skip
    known = {p["name"] for p in await m.pools.pools()}
    missing = [n for n in names if n not in known]
    if missing:
        raise NotFoundError(f"no worker pool {missing[0]!r}", field="pool",
                            hint="see `skyd jobs pool status`")  # fmt: skip
    for n in names:
        await m.pools.down(n, ctx.log)
    return {"down": names}


async def pool_status(ctx: ReadContext, request: web.Request) -> Any:
    m = require_manager()
    want = request.query.get("name")
    out = []
    for p in await m.pools.pools():
        if want and p["name"] != want:
            continue
        ws = []
        for w in await m.pools.workers(p["name"]):
            cs = "UNKNOWN"
            with anyio.move_on_after(5):
                try:
                    cs = await m.ops.cluster_status(str(w["cluster"]))
                except Exception:  # noqa: BLE001 - shown as UNKNOWN
                    pass
            ws.append({"id": w["idx"], "cluster": w["cluster"], "status": w["status"],
                       "cluster_status": cs, "job_id": w["job_id"],
                       "last_job_id": w["last_job_id"], "reason": w["reason"]})  # fmt: skip
        out.append({"name": p["name"], "status": p["status"], "workers": p["workers"],
                    "worker_rows": ws})  # fmt: skip
    if want and not out:
        raise NotFoundError(f"no worker pool {want!r}", field="pool",
                            hint="see `skyd jobs pool status`")  # fmt: skip
    return out


async def pool_logs(ctx: ReadContext, request: web.Request) -> Any:
    m = require_manager()
    name = request.match_info["name"]
    if await m.pools.get(name) is None:
        raise NotFoundError(f"no worker pool {name!r}", field="pool",
                            hint="see `skyd jobs pool status`")  # fmt: skip
    want = {int(i) for i in request.query.getall("worker", []) if i.isdigit()}
    rows = [w for w in await m.pools.workers(name) if not want or int(w["idx"]) in want]

    async def lines() -> AsyncIterator[dict[str, str]]:
        yield {"text": ""}
        for w in rows:
            yield {"text": f"=== worker {w['idx']} ({w['cluster']}, {w['status']}): setup ===\n"}
            if w["setup_job_id"] is None:
                continue
            try:
                async for chunk in m.ops.tail_logs(str(w["cluster"]), int(w["setup_job_id"]), False):
                    yield {"text": chunk.decode(errors="replace")}
            except Exception as e:  # noqa: BLE001 - worker gone
                yield {"text": f"(no log: {e})\n"}

    return await ctx.stream_ndjson(request, lines())


register_verb("jobs.pool_apply", pool_apply, check=check_pool_apply)
register_verb("jobs.pool_down", pool_down, check=check_pool_down)
register_read("GET", "/v1/pools", pool_status)
register_read("GET", "/v1/pools/{name}/logs", pool_logs)
