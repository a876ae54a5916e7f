"""Built-in verbs and reads: health, version, status, watch, validate, sleep."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from aiohttp import web

import skyd
from skyd import paths
from skyd.daemon import api_models as m
from skyd.daemon.context import ReadContext, RequestContext
from skyd.daemon.http import JSON_CT, dumpb
from skyd.daemon.registry import register_read, register_verb
from skyd.errors import InvalidSpecError, SkydError

STATUS_SQL = (
    "SELECT name, status, cloud, region, zone, instance_type, accelerators, num_nodes, "
    "use_spot, hourly_cost, launched_at, status_updated_at, autostop_minutes, autostop_down, "
    "resources, last_use, request_id, status_reason FROM clusters ORDER BY name"
)
_BOOL_COLS = ("use_spot", "autostop_down")


# -- reads -----------------------------------------------------------------------------
async def health(ctx: ReadContext, request: web.Request) -> Any:
    """Liveness and identity of the daemon."""
    d = ctx.daemon
    return {
        "status": "ok", "version": skyd.__version__, "pid": d.pid,
        "uptime_s": round(time.monotonic() - d.started_mono, 3),
        "socket": str(d.socket_path), "home": str(paths.home()),
        "requests_in_flight": len(d.requests.active),
        "shared_socket": str(d.shared_socket) if d.shared_socket is not None else None,
    }


async def version(ctx: ReadContext, request: web.Request) -> Any:
    """The daemon's version and API version."""
    return {"version": skyd.__version__, "api": "v1"}


async def status(ctx: ReadContext, request: web.Request) -> Any:
    """Clusters, from SQLite (no refresh). ?name=a,b filters by name."""
    names = [n for n in request.query.get("name", "").split(",") if n]
    if names:
        return [r for r in await _cluster_rows(ctx) if r["name"] in names]

    async def build() -> bytes:
        return dumpb(await _cluster_rows(ctx))

    body = await ctx.store.cached("status", build)
    return web.Response(body=body, content_type=JSON_CT)


async def _cluster_rows(ctx: ReadContext) -> list[dict[str, Any]]:
    rows = await ctx.store.fetchall(STATUS_SQL, json_cols=("accelerators", "resources"))
    for r in rows:
        for c in _BOOL_COLS:
            if r[c] is not None:
                r[c] = bool(r[c])
        r["last_use"] = epoch(r.get("last_use"))
    return rows


def epoch(v: Any) -> float | None:
    """A timestamp column as a number (``last_use`` is a TEXT column in older schemas)."""
    try:
        return None if v in (None, "") else float(v)
    except (TypeError, ValueError):
        return None


async def watch(ctx: ReadContext, request: web.Request) -> Any:
    """ndjson stream of state-change events (?topics=requests,clusters); never ends. Only
    the events of the caller's own objects, as the listings (?all_users=1: everyone's)."""
    from skyd.daemon import owners

    topics = [t for t in request.query.get("topics", "").split(",") if t] or None
    seen = owners.EventFilter(ctx.store, request.get("skyd_caller"),
                              owners.wants_all(request.query))

    async def events() -> AsyncIterator[Any]:
        yield {"topic": "_hello", "ts": time.time(), "data": {"pid": ctx.daemon.pid}}
        async for ev in ctx.bus.subscribe(topics):
            if await seen.visible(ev):
                yield ev

    return await ctx.stream_ndjson(request, events())


async def validate(ctx: ReadContext, request: web.Request) -> Any:
    """Load a task YAML (text) and answer its normalized DAG plus warnings."""
    body = ctx.body or {}
    try:
        from skyd.models import load_dag
    except ImportError as e:
        raise SkydError(f"task model unavailable: {e}") from None

    def run() -> dict[str, Any]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dag = load_dag(
                body.get("path") or "<request>", text=body["yaml"],
                env_overrides=body.get("env") or {}, base_dir=Path(body.get("base_dir") or os.getcwd()),
                allow_missing_env=True,
            )
            from skyd.models.precheck import precheck

            precheck(dag, body.get("base_dir"))  # the launch's own precheck
            normalized = dag.to_normalized()
            msgs = task_warnings(dag)
        both = [str(w.message) for w in caught] + msgs
        return {"dag": normalized, "warnings": list(dict.fromkeys(both))}

    return await anyio.to_thread.run_sync(run)


def task_warnings(dag: Any) -> list[str]:
    """Warnings of every task's validators, plus envs left to give at launch."""
    out: list[str] = []
    for t in getattr(dag, "tasks", []):
        out.extend(t.validate())
        for k in t.required_envs():
            out.append(f"secret {k} has no value: give it at launch with --secret {k}"
                       if k in t.secrets else
                       f"env {k} has no value: give it at launch with --env {k}=VALUE")
    return out


# -- verbs -----------------------------------------------------------------------------
async def sleep(ctx: RequestContext, payload: dict[str, Any]) -> Any:
    """Sleep, logging a line every log_every seconds (tests and benchmarks)."""
    seconds = float(payload["seconds"])
    every = float(payload["log_every"])
    start = time.monotonic()
    if ctx.resumed:
        ctx.log("resumed after a daemon restart")
    i = 0
    while (left := seconds - (time.monotonic() - start)) > 0:
        await anyio.sleep(min(every, left))
        i += 1
        ctx.log(f"slept {min(i * every, seconds):.1f}s of {seconds:g}s")
    if payload.get("fail"):
        raise InvalidSpecError(str(payload["fail"]), field="fail", hint="this is the sleep verb")
    return {"slept": round(time.monotonic() - start, 3), "resumed": ctx.resumed}


_registered = False


def register() -> None:
    global _registered
    if _registered:
        return
    _registered = True
    register_read("GET", "/v1/health", health, response=m.HealthResponse)
    register_read("GET", "/v1/version", version, response=m.VersionResponse)
    register_read("GET", "/v1/status", status, summary="Clusters from SQLite (no refresh)")
    register_read("GET", "/v1/watch", watch)
    register_read("POST", "/v1/validate", validate, body=m.ValidateBody, response=m.ValidateResponse)
    register_verb("sleep", sleep, body=m.SleepBody)
