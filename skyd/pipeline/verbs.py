"""The cluster verbs and reads, registered with the daemon (see skyd.daemon.plugins).

Verbs (requests): launch (resumable), exec, stop, start, down, autostop, cancel.
Reads: status (the clusters, from SQLite), queue, job logs (a raw byte stream), status refresh, cost-report.
A background task refreshes cluster state every $SKYD_REFRESH_S (autostop, dead agents).
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

import anyio
from aiohttp import web

from skyd import settings
from skyd.clouds.base import close_clouds, get_cloud
from skyd.daemon.http import JSON_CT, dumpb
from skyd.daemon.registry import on_shutdown, on_startup, register_read, register_verb
from skyd.errors import ClusterStateError, NotFoundError
from skyd.pipeline import checks, cloudcheck, leaks, lifecycle, locks
from skyd.pipeline import clusters_db as cdb
from skyd.pipeline import schema as _schema  # noqa: F401 - registers the tables
from skyd.pipeline.agents import agent, close_agent_channels

log = logging.getLogger("skyd.pipeline.verbs")


async def _status(ctx: Any, request: Any) -> Any:
    """Clusters, from SQLite (no refresh). ?name=a,b filters by name. The unfiltered
    listing many clients poll is built once per database change."""
    names = [n for n in request.query.get("name", "").split(",") if n]
    if names:
        return [r for r in await cdb.status_rows(ctx.store) if r["name"] in names]

    async def build() -> bytes:
        return dumpb(await cdb.status_rows(ctx.store))

    body = await ctx.store.cached("status", build)
    return web.Response(body=body, content_type=JSON_CT)


async def _addresses(ctx: Any, request: Any) -> Any:
    """A cluster's status row with its nodes' addresses and ports (`status --ip`,
    `--endpoints`, `skyd shell`): from SQLite, no token."""
    row = await cdb.require_cluster(ctx.store, request.match_info["cluster"])
    return cdb.public_cluster(row)


async def _queue(ctx: Any, request: Any) -> Any:
    name = request.match_info["cluster"]
    row = await cdb.require_cluster(ctx.store, name)
    handle = cdb.handle_of(row)
    stale = True
    if handle is not None and lifecycle.agent_may_be_dead(row):
        try:
            row, handle, _ = await lifecycle.answering_agents(ctx.store, name, row, handle)
            with anyio.fail_after(5):
                async with agent(get_cloud(handle.cloud).provisioner(), handle) as c:
                    await cdb.upsert_jobs(ctx.store, name, await c.job_queue())
            stale = False
        except Exception:  # noqa: BLE001 - fall back to the mirror
            stale = True
    jobs = await cdb.list_jobs(ctx.store, name)
    if request.query.get("skip_finished") in ("1", "true"):
        jobs = [j for j in jobs if j["status"] not in cdb.TERMINAL_JOB]
    return {"cluster": name, "status": row["status"], "stale": stale, "jobs": jobs}


async def _logs(ctx: Any, request: Any) -> Any:
    from aiohttp import web

    from skyd.daemon.http import int_param

    name = request.match_info["cluster"]
    # Bad numbers are the caller's mistake (400 naming the parameter), checked first.
    from skyd.bounds import BOUNDS

    tail = int(int_param(request, "tail", 0, hi=int(BOUNDS["tail_lines"].hi)) or 0)
    node = int_param(request, "node", None, hi=1_000_000)
    req_job = int_param(request, "job_id", None, lo=1)
    row = await cdb.require_cluster(ctx.store, name)
    handle = cdb.handle_of(row)
    if handle is None or not lifecycle.agent_may_be_dead(row):
        raise ClusterStateError(f"cluster {name!r} is {row['status']}", hint=f"`skyd start {name}`")
    row, handle, note = await lifecycle.answering_agents(ctx.store, name, row, handle)
    prov = get_cloud(handle.cloud).provisioner()
    q = request.query
    follow = q.get("follow", "1") in ("1", "true")
    async with agent(prov, handle) as c:
        queue = await c.job_queue()
        if not queue:
            raise NotFoundError(f"cluster {name!r} has no jobs", hint=f"`skyd exec {name} ...`")
        job_id = req_job if req_job is not None else max(int(j["job_id"]) for j in queue)
        job = next((j for j in queue if int(j["job_id"]) == job_id), None)
        if job is None:
            raise NotFoundError(
                f"job {job_id} not found on cluster {name!r}",
                hint=f"`skyd queue {name}` lists its jobs",
            )
        if q.get("status_only") in ("1", "true"):
            return {"cluster": name, "job_id": job_id, "status": job["status"],
                    "exit_code": job.get("exit_code")}
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream",
                                           "X-Skyd-Job-Id": str(job_id)})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if note:
            await resp.write(f"skyd: {note}\n".encode())
        kw: dict[str, Any] = {"follow": follow, "tail": tail}
        if node is not None:
            kw["node"] = node
        try:
            async for chunk in c.tail_logs(job_id, **kw):
                await resp.write(chunk)
            await resp.write_eof()
        except ConnectionError:  # the follower left (Ctrl-C, closed terminal): normal
            log.info("logs %s job %d: the client went away", name, job_id)
        return resp


async def _refresh(ctx: Any, request: Any) -> Any:
    """Refresh the named clusters (or all of the caller's; ``all_users``: everyone's) from
    their agents. Another user's named cluster is refused unless the caller is an admin."""
    from skyd.daemon import owners

    body = ctx.body or {}
    caller = owners.CALLER.get()
    if body.get("clusters"):
        await owners.check_owned(ctx.store, caller, "cluster", list(body["clusters"]), "refresh")
    names = body.get("clusters") or [r["name"] for r in await ctx.store.fetchall("SELECT name FROM clusters")]
    if not body.get("clusters") and caller is not None and not owners.wants_all(request.query):
        mine = await owners.owners_of(ctx.store, "cluster", names)
        names = [n for n in names if (mine.get(n) or owners.daemon_user()) == caller.name]
    await leaks.leak_pass(ctx.store, names)  # half-made attempts nobody is finishing
    if not body.get("clusters"):
        await leaks.orphan_pass(ctx.store)  # labelled objects no cluster row knows
    out = []
    for name in names:
        row = await lifecycle.refresh_cluster(ctx.store, name, repair=True)
        if row is not None:
            out.append(cdb.public_cluster(row))
    return out


async def _cost_report(ctx: Any, request: Any) -> Any:
    """Live and torn-down clusters with their cost: the caller's own (as the listings),
    every user's with ``?all_users=1``; each row says whose it is."""
    from skyd.daemon import owners

    caller = owners.CALLER.get()
    mine = ""  # everyone's
    args: tuple[str, ...] = ()
    if caller is not None and not owners.wants_all(request.query):
        mine = " WHERE COALESCE(user, ?) = ?"
        args = (owners.daemon_user(), caller.name)
    now = time.time()
    rows = []
    for r in await ctx.store.fetchall(f"SELECT * FROM clusters{mine}", args):
        r = dict(r)
        dur = cdb.billed_seconds(r, now)  # time UP (or unhealthy); stopped periods are free
        rows.append(
            {"name": r["name"], "status": r["status"], "cloud": r.get("cloud"),
             "num_nodes": r.get("num_nodes"), "hourly_cost": r.get("hourly_cost") or 0.0,
             "duration_s": dur, "cost": (r.get("hourly_cost") or 0.0) * dur / 3600.0,
             "user": r.get("user") or owners.daemon_user()}
        )
    for r in await ctx.store.fetchall(
            f"SELECT * FROM cluster_history{mine} ORDER BY ended_at DESC", args):
        r = dict(r)
        rows.append(
            {"name": r["name"], "status": "TERMINATED", "cloud": r.get("cloud"),
             "num_nodes": r.get("num_nodes"), "hourly_cost": r.get("hourly_cost") or 0.0,
             "duration_s": r.get("duration_s") or 0.0, "cost": r.get("cost") or 0.0,
             "user": r.get("user") or owners.daemon_user()}
        )
    return {"clusters": rows, "total_cost": sum(r["cost"] for r in rows)}


async def _k8s_gpus(ctx: Any, request: Any) -> Any:
    """`show-gpus --infra k8s[/<context>]`: free and total GPUs per context and accelerator,
    listed by the daemon's warm kubernetes client (contexts from the daemon's kubeconfig,
    as launches use). ?context= keeps one context."""
    rows: list[dict[str, Any]] = await get_cloud("kubernetes").gpu_table()  # type: ignore[attr-defined]
    want = request.query.get("context")
    return [r for r in rows if r["context"] == want] if want else rows


async def _check(ctx: Any, request: Any) -> Any:
    """Every infra this daemon knows: can it launch, is it shown in plans (`--dryrun` plans
    over every catalog), and why / how to enable it. Providers are probed now (credential
    checks may use the network) and the answers cached in SQLite for launches (`?cached=1`
    answers from the cache when fresh). ?catalog_dir= is the caller's SKYD_CATALOG_DIR."""
    from skyd.clouds.base import registered_clouds
    from skyd.pipeline.planner import catalog_at, how_to_enable

    catalog = await anyio.to_thread.run_sync(catalog_at, request.query.get("catalog_dir") or None)
    out = []
    registered = set(registered_clouds())
    refresh = request.query.get("cached") not in ("1", "true")
    results = await cloudcheck.checks(ctx.store, registered, refresh=refresh)
    for name in sorted(registered):
        r = results[name]
        out.append({"infra": name, "launch": r.ok, "plan": r.ok, "reason": r.reason,
                    "checked_at": r.checked_at})
    for name in catalog.clouds:
        if name in registered:
            continue
        why = how_to_enable(name)
        if name in catalog.enabled:
            why = "SKYD_CATALOG_DIR: " + why
        out.append({"infra": name, "launch": False, "plan": True, "reason": why})
    return out


async def _refresher(daemon: Any) -> None:
    """Keeps cluster rows honest: autostopped nodes, dead agents, vanished instances."""
    while True:
        await anyio.sleep(settings.REFRESH_S.get())  # tests shorten it
        for r in await daemon.store.fetchall("SELECT name, status FROM clusters"):
            if r["status"] == cdb.INIT and r["name"] in locks.busy():
                continue
            try:
                with anyio.move_on_after(30):  # one stuck node must not stall the rest
                    await lifecycle.refresh_cluster(daemon.store, r["name"], repair=False)
            except Exception:  # noqa: BLE001 - next round tries again
                pass


async def _leak_pass(daemon: Any) -> None:
    cleaned = await leaks.leak_pass(daemon.store)
    if cleaned:
        import logging

        logging.getLogger("skyd.leaks").warning(
            "removed what interrupted provisionings left for: %s", ", ".join(cleaned))


async def _startup(daemon: Any) -> None:
    from skyd.nodeagent import zygote

    zygote.enable()  # `local` agents fork from a warm one (started with the first)
    cdb.set_publisher(daemon.bus.publish)
    daemon.spawn("leak-pass", _leak_pass, daemon)
    daemon.spawn("cluster-refresher", _refresher, daemon)


async def _shutdown(daemon: Any) -> None:
    from skyd.nodeagent import zygote

    await close_clouds()  # every loaded provider's clients (HTTP sessions, SSH)
    close_agent_channels()
    await anyio.to_thread.run_sync(zygote.close_shared)


# The launch path (provisioning, the agent's wire types) loads with the first launch or
# exec, not when the daemon starts; in a worker thread, so the loop keeps serving meanwhile.
async def _launch() -> Any:
    return await anyio.to_thread.run_sync(importlib.import_module, "skyd.pipeline.launch")


async def _run_launch(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    return dict(await (await _launch()).run_launch(ctx, payload))


async def _run_exec(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    return dict(await (await _launch()).run_exec(ctx, payload))


def _register() -> None:
    register_verb("launch", _run_launch, resumable=True, summary="Launch a task on a cluster",
                  check=checks.check_launch)
    register_verb("exec", _run_exec, summary="Run a task on an existing cluster",
                  check=checks.check_exec)
    register_verb("stop", lifecycle.run_stop, summary="Stop clusters", check=checks.check_targets)
    register_verb("start", lifecycle.run_start, summary="Start stopped clusters",
                  check=checks.check_targets)
    register_verb("down", lifecycle.run_down, summary="Tear down clusters",
                  check=checks.check_targets)
    register_verb("autostop", lifecycle.run_autostop, summary="Set or cancel autostop",
                  check=checks.check_autostop)
    register_verb("cancel", lifecycle.run_cancel, summary="Cancel jobs on a cluster",
                  check=checks.check_cancel)
    register_read("GET", "/v1/status", _status, summary="Clusters from SQLite (no refresh)")
    register_read("GET", "/v1/clusters/{cluster}/queue", _queue, summary="Jobs on a cluster")
    register_read("GET", "/v1/clusters/{cluster}/logs", _logs, summary="Latest job's log stream")
    register_read("GET", "/v1/clusters/{cluster}/jobs/{job_id}/logs", _logs, summary="A job's log")
    register_read("POST", "/v1/status/refresh", _refresh, summary="Refresh clusters from agents")
    register_read("GET", "/v1/clusters/{cluster}/addresses", _addresses,
                  summary="A cluster's node addresses and ports")
    register_read("GET", "/v1/cost-report", _cost_report, summary="Cost of clusters")
    register_read("GET", "/v1/check", _check, summary="Which infras can launch or be planned")
    register_read("GET", "/v1/gpus/k8s", _k8s_gpus, summary="GPUs free per kubernetes context")
    on_startup(_startup)
    on_shutdown(_shutdown)
    from skyd.clouds.config_support import warning_lines
    from skyd.daemon.request_config import add_warner

    add_warner(warning_lines)


_register()
