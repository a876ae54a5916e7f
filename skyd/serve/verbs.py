"""Daemon plugin: serving verbs and reads (listed in skyd.daemon.plugins).

- verb ``serve.up``   {yaml, yaml_path, base_dir, env, name} → {"name", "endpoint"}
- verb ``serve.update`` {name, yaml, ..., mode: rolling|blue_green} → {"name", "version"}
- verb ``serve.down`` {names, all} → {"down": [names]} (answers once the replicas are gone)
- read ``GET /v1/services`` → every service with its replicas and load-balancer figures
- read ``GET /v1/services/{name}`` → one of them
- read ``GET /v1/services/{name}/logs`` (?replica=ID&follow=0) → ndjson {"text": …}; without
  a replica: the controller's log (autoscaler decisions, transitions, load balancer)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from skyd.daemon.http import text_chunks
from skyd.daemon.registry import on_shutdown, on_startup, register_read, register_verb
from skyd.errors import InvalidSpecError, NotFoundError, SkydError
from skyd.serve import schema as _schema  # noqa: F401 - registers the tables
from skyd.serve.manager import ServeManager, current_manager

if TYPE_CHECKING:
    from aiohttp import web

    from skyd.daemon.context import ReadContext, RequestContext
    from skyd.daemon.host import Host


async def _startup(daemon: Host) -> None:
    from skyd import paths
    from skyd.jobs.pipeline_ops import PipelineClusterOps

    log_dir = paths.logs_dir() / "serve"
    await anyio.to_thread.run_sync(lambda: log_dir.mkdir(parents=True, exist_ok=True))
    m = ServeManager(daemon.store, PipelineClusterOps(daemon.store), daemon.spawn,
                     log_dir=log_dir, publish=daemon.bus.publish)
    await m.resume_all()


async def _shutdown(daemon: Host) -> None:
    try:
        m = current_manager()
    except RuntimeError:
        return
    await m.stop()
    from skyd.jobs.logfile import CONTROLLER_LOG

    await anyio.to_thread.run_sync(CONTROLLER_LOG.flush)


def _m() -> ServeManager:
    try:
        return current_manager()
    except RuntimeError:
        raise SkydError("serving is not available in this daemon") from None


async def _prepare(payload: dict[str, Any]) -> tuple[str, dict[str, Any], int]:
    from skyd.serve.spec import load_service, pick_lb_port

    m = _m()
    name, spec = await anyio.to_thread.run_sync(load_service, payload)
    if await m.db.get_service(name) is not None:
        raise InvalidSpecError(f"a service named {name!r} exists", field="name",
                               hint="pick another -n NAME, or `skyd serve down` it first")
    taken = {int(s["lb_port"]) for s in await m.db.services() if s["lb_port"]}
    port = await anyio.to_thread.run_sync(pick_lb_port, m.host, spec, taken)
    return name, spec, port


async def _keep_secrets(name: str, spec: dict[str, Any]) -> None:
    """Move the spec's secret values into a 0600 file (SKYD_HOME/secrets/jobs/svc-NAME-*)
    named by ``secrets_ref``; replica launches read it (skyd.jobs.job_secrets.with_secrets)."""
    from skyd import secretfiles
    from skyd.serve.spec import SECRET_VALUES

    values = spec.pop(SECRET_VALUES, None) or {}
    if not values:
        return
    ref = f"{SERVICE_SECRETS_PREFIX}{name}-{secretfiles.new_job_ref()}"
    await secretfiles.awrite(secretfiles.job_file(ref), {"tasks": [values]}, exclusive=True)
    spec["secrets_ref"] = ref


SERVICE_SECRETS_PREFIX = "svc-"


async def _drop_secrets(name: str) -> None:
    from skyd import secretfiles

    for ref in await secretfiles.anames("jobs"):
        if ref.startswith(f"{SERVICE_SECRETS_PREFIX}{name}-"):
            await secretfiles.aremove(secretfiles.job_file(ref))


async def check_serve_up(payload: dict[str, Any]) -> None:
    await _prepare(payload)


async def serve_up(ctx: RequestContext, payload: dict[str, Any]) -> dict[str, Any]:
    """Bring a service up: its load balancer at once, its replicas as they launch."""
    name, spec, port = await _prepare(payload)
    await _keep_secrets(name, spec)
    out = await _m().up(name, spec, port)
    ctx.log(f"Service {name}: endpoint {out['endpoint']}")
    return out


async def _prepare_update(payload: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    from skyd.serve.spec import load_service

    m = _m()
    name = payload.get("name")
    if not isinstance(name, str) or await m.db.get_service(name) is None:
        raise NotFoundError(f"no service {name!r}", hint="see `skyd serve status`")
    mode = payload.get("mode") or "rolling"
    if mode not in ("rolling", "blue_green"):
        raise InvalidSpecError(f"unknown update mode {mode!r}", field="mode",
                               hint="rolling or blue_green")
    _, spec = await anyio.to_thread.run_sync(load_service, {**payload, "name": name})
    return name, spec, str(mode)


async def check_serve_update(payload: dict[str, Any]) -> None:
    await _prepare_update(payload)


async def serve_update(ctx: RequestContext, payload: dict[str, Any]) -> dict[str, Any]:
    """Roll a service to a new task YAML (rolling, or blue_green)."""
    name, spec, mode = await _prepare_update(payload)
    await _keep_secrets(name, spec)
    version = await _m().update(name, spec, mode)
    ctx.log(f"Service {name}: updating to version {version} ({mode})")
    return {"name": name, "version": version}


async def check_serve_down(payload: dict[str, Any]) -> None:
    names = payload.get("names") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidSpecError("names must be a list of service names", field="names")
    if not names and not payload.get("all"):
        raise InvalidSpecError("say which services to take down", field="names",
                               hint="skyd serve down NAME... | -a")


async def serve_down(ctx: RequestContext, payload: dict[str, Any]) -> dict[str, Any]:
    """Take services down: their replicas' clusters are removed, then the rows."""
    names = await _m().down(list(payload.get("names") or []),
                            all_services=bool(payload.get("all")))
    for n in names:
        await _drop_secrets(n)
    ctx.log(f"Service(s) down: {', '.join(names)}" if names else "No service")
    return {"down": names}


async def _view(m: ServeManager, svc: dict[str, Any]) -> dict[str, Any]:
    reps = await m.db.replicas(svc["name"])
    c = m.controllers.get(svc["name"])
    spec = svc.pop("spec") or {}
    out = {**svc, "policy": (spec.get("service") or {}).get("load_balancing_policy"),
           "replica_policy": (spec.get("service") or {}).get("replica_policy"),
           "replicas": [{k: v for k, v in r.items()} for r in reps]}
    if c is not None and c.lb is not None:
        out["load_balancer"] = c.lb.stats()
    if c is not None and c.last is not None:
        out["autoscaler"] = {"name": c.scaler.name if c.scaler else None,
                             "target": c.last.target, "reason": c.last.reason,
                             "inputs": c.last.inputs}
    return out


async def services_list(ctx: ReadContext, request: web.Request) -> Any:
    """Every service with its replicas."""
    m = _m()
    return [await _view(m, s) for s in await m.db.services()]


async def _get(m: ServeManager, request: web.Request) -> dict[str, Any]:
    name = request.match_info["name"]
    svc = await m.db.get_service(name)
    if svc is None:
        raise NotFoundError(f"no service {name!r}", hint="see `skyd serve status`")
    return svc


async def service_get(ctx: ReadContext, request: web.Request) -> Any:
    """One service with its replicas."""
    m = _m()
    return await _view(m, await _get(m, request))


async def service_logs(ctx: ReadContext, request: web.Request) -> Any:
    """A replica's output, or the controller's log."""
    m = _m()
    svc = await _get(m, request)
    follow = request.query.get("follow", "1") != "0"
    if request.query.get("load_balancer") in ("1", "true"):
        return await ctx.stream_ndjson(request, _access_lines(m, svc["name"], follow))
    rid_s = request.query.get("replica")
    row: dict[str, Any] | None = None
    if rid_s:
        try:
            rid = int(rid_s)
        except ValueError:
            raise InvalidSpecError("a replica id is a number", field="replica") from None
        row = next((r for r in await m.db.replicas(svc["name"]) if int(r["replica_id"]) == rid), None)
        if row is None:
            raise NotFoundError(f"service {svc['name']} has no replica {rid}",
                                hint=f"see `skyd serve status {svc['name']}`")

    async def lines() -> AsyncIterator[dict[str, str]]:
        if row is None:
            from skyd.jobs.logfile import CONTROLLER_LOG

            await anyio.to_thread.run_sync(CONTROLLER_LOG.flush)
            async for text in text_chunks(m.log_path(svc["name"])):
                yield {"text": text}
            yield {"text": ""}
            return
        from skyd.serve import status as st

        if row["status"] in st.FINAL:  # its cluster is gone: the log kept at teardown
            from skyd.jobs.pipeline_ops import saved_log

            async for text in text_chunks(saved_log(str(row["cluster"]))):
                yield {"text": text}
            yield {"text": f"replica {row['replica_id']} {row['status']}: "
                           f"{row['status_reason'] or ''}\n"}
            return
        if row["job_id"] is None:
            yield {"text": f"replica {row['replica_id']} is {row['status']}: no program yet\n"}
            return
        try:
            async for chunk in m.ops.tail_logs(str(row["cluster"]), int(row["job_id"]), follow):
                yield {"text": chunk.decode(errors="replace")}
        except Exception as e:  # noqa: BLE001 - its cluster went away
            yield {"text": f"replica {row['replica_id']}: no log ({type(e).__name__})\n"}

    return await ctx.stream_ndjson(request, lines())


async def _access_lines(m: ServeManager, name: str, follow: bool) -> AsyncIterator[dict[str, str]]:
    """The load balancer's access log (the rotated part first); following, new lines as
    the controller writes them, across a rotation."""
    path = m.access_log_path(name)
    async for text in text_chunks(path.with_name(path.name + ".1")):
        yield {"text": text}
    pos = 0
    while True:
        try:
            size = (await anyio.Path(path).stat()).st_size
        except FileNotFoundError:
            size = 0
        if size < pos:  # rotated: what was left in the old file is in .1, read the new one
            pos = 0
        if size > pos:
            async with await anyio.open_file(path, "rb") as f:
                await f.seek(pos)
                data = await f.read(size - pos)
            end = data.rfind(b"\n") + 1  # whole lines only
            if end:
                pos += end
                yield {"text": data[:end].decode(errors="replace")}
        if not follow:
            yield {"text": ""}
            return
        if m.controllers.get(name) is None and await m.db.get_service(name) is None:
            return
        await anyio.sleep(0.5)


register_verb("serve.up", serve_up, check=check_serve_up)
register_verb("serve.update", serve_update, check=check_serve_update)
register_verb("serve.down", serve_down, check=check_serve_down)
register_read("GET", "/v1/services", services_list)
register_read("GET", "/v1/services/{name}", service_get)
register_read("GET", "/v1/services/{name}/logs", service_logs)
on_startup(_startup)
on_shutdown(_shutdown)
