"""Built-in verbs and reads: health, version, watch, validate, sleep.

The core answers only what it owns; ``GET /v1/status`` (the clusters) is the pipeline's
(skyd.pipeline.verbs), registered from its plugin."""

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
from skyd.daemon.registry import register_read, register_verb
from skyd.errors import InvalidSpecError, SkydError


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
    register_read("GET", "/v1/watch", watch)
    register_read("POST", "/v1/validate", validate, body=m.ValidateBody, response=m.ValidateResponse)
    register_verb("sleep", sleep, body=m.SleepBody)
