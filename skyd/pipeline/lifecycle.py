"""stop / start / down / autostop / cancel / refresh of clusters."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from skyd import human
from skyd.clouds.base import (
    NODE_PENDING,
    NODE_PREEMPTED,
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    get_cloud,
)
from skyd.errors import ClusterStateError, NotFoundError, SkydError
from skyd.pipeline import clusters_db as cdb
from skyd.pipeline.agents import agent, agent_healthy
from skyd.pipeline.locks import cluster_lock


def _noop(_: str) -> None:
    return None


#: the infras that could provision before rows carried their location (schema < v3)
LEGACY_INFRAS = frozenset({"local", "ssh"})


async def down_cluster(ctx: Any, name: str) -> dict[str, Any]:
    store = ctx.store
    row = await cdb.require_cluster(store, name)
    handle = cdb.handle_of(row)
    partial = cdb.partial_of(row)
    if handle is not None:
        await get_cloud(handle.cloud).provisioner().terminate(handle, ctx.log)
    elif partial is not None:
        # Never got a handle (a launch died mid-provision): only the cloud it was
        # provisioning on is asked to remove what carries its tag there.
        from skyd.pipeline.provision import forget

        ctx.log(f"Removing what the provisioning of {name} left on {partial.describe()}")
        await forget(store, partial, ctx.log)
    else:
        # A row without a location was written before partial handles existed, when only
        # the machine-local infras could provision: each cleans what it may have started
        # for this name (no cloud API is asked about a row it never saw).
        from skyd.clouds.base import PartialHandle, registered_clouds

        for cloud_name in LEGACY_INFRAS & set(registered_clouds()):
            await get_cloud(cloud_name).provisioner().forget(
                PartialHandle(name, cloud_name, None, None, name))
    await cdb.remove_cluster(store, name)
    ctx.log(f"Cluster {name} terminated.")
    from skyd.storage.mounts import on_down

    await on_down(store, name, ctx.log)
    return {"cluster": name, "status": "TERMINATED"}


async def _for_each(
    ctx: Any, payload: dict[str, Any], one: Callable[[str], Awaitable[bool]]
) -> dict[str, Any]:
    """Run `one(name)` for every target cluster concurrently, each under its cluster lock.
    One cluster's failure does not stop the others; it is reported at the end."""
    names = await _targets(ctx.store, payload)
    done: list[str] = []
    errors: list[tuple[str, SkydError]] = []

    async def run(name: str) -> None:
        async with cluster_lock(name):
            try:
                if await one(name):
                    done.append(name)
            except SkydError as e:
                errors.append((name, e))
                ctx.log(f"{name}: {e}")
            except Exception as e:  # noqa: BLE001 - one bad row must not fail the others
                err = SkydError(f"{type(e).__name__}: {e}")
                errors.append((name, err))
                ctx.log(f"{name}: {err}")

    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(run, name)
    if len(errors) == 1 and len(names) == 1:
        raise errors[0][1]
    if errors:
        raise SkydError(
            f"{len(errors)} of {len(names)} clusters failed: "
            + "; ".join(f"{n}: {e}" for n, e in errors),
            hint="the others were done; see `skyd status`",
        )
    return {"clusters": sorted(done)}


async def run_down(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    purge = payload.get("purge") is True

    async def one(name: str) -> bool:
        await ctx.stage(f"DOWN {name}", "start")
        try:
            await down_cluster(ctx, name)
        except Exception as e:
            if not purge or isinstance(e, NotFoundError):
                raise
            # --purge (as sky down -p): the provider's error is reported, the record goes
            # anyway; what may be left on the provider is the user's to check.
            ctx.log(f"warning: {name}: the provider failed ({type(e).__name__}: {e}); "
                    "--purge removes the record anyway: check the provider's console for leftovers")
            await cdb.remove_cluster(ctx.store, name)
        await ctx.stage(f"DOWN {name}", "done")
        return True

    return await _for_each(ctx, payload, one)


async def run_stop(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    async def one(name: str) -> bool:
        row = await cdb.require_cluster(ctx.store, name)
        handle = cdb.handle_of(row)
        if handle is None:
            raise ClusterStateError(f"cluster {name!r} is still provisioning",
                                    hint="wait, or `skyd down` it")
        if row["status"] == cdb.STOPPED:
            ctx.log(f"Cluster {name} is already stopped.")
            return False
        await ctx.stage(f"STOP {name}", "start")
        await get_cloud(handle.cloud).provisioner().stop(handle, ctx.log)
        await cdb.set_status(ctx.store, name, cdb.STOPPED, "stopped by user")
        await ctx.stage(f"STOP {name}", "done")
        return True

    return await _for_each(ctx, payload, one)


async def run_start(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    async def one(name: str) -> bool:
        row = await cdb.require_cluster(ctx.store, name)
        handle = cdb.handle_of(row)
        if handle is None:
            raise ClusterStateError(f"cluster {name!r} has no nodes yet",
                                    hint=f"`skyd down {name}` and launch again")
        prov = get_cloud(handle.cloud).provisioner()
        if row["status"] == cdb.UP and await agent_healthy(prov, handle):
            ctx.log(f"Cluster {name} is already UP.")
            return False
        await ctx.stage(f"START {name}", "start")
        handle = await prov.start(handle, ctx.log)
        await cdb.save_handle(ctx.store, handle, cdb.UP)
        if row.get("autostop_minutes") is not None:
            async with agent(prov, handle) as c:
                await c.set_autostop(float(row["autostop_minutes"]),
                                     bool(row.get("autostop_down")))
        await ctx.stage(f"START {name}", "done")
        return True

    return await _for_each(ctx, payload, one)


async def run_autostop(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    names = await _targets(ctx.store, payload)
    cancel = bool(payload.get("cancel"))
    raw = payload.get("idle_minutes")
    minutes: float = -1 if cancel else float(raw if raw is not None else 5)
    down = bool(payload.get("down"))
    for name in names:
        row = await cdb.require_cluster(ctx.store, name)
        handle = cdb.handle_of(row)
        if handle is None or row["status"] != cdb.UP:
            raise ClusterStateError(f"cluster {name!r} is {row['status']}", hint=f"`skyd start {name}` first")
        async with agent(get_cloud(handle.cloud).provisioner(), handle) as c:
            await c.set_autostop(float(minutes), down)
        await cdb.set_autostop(ctx.store, name, None if cancel else minutes, down)
        ctx.log(
            f"Autostop cancelled for {name}."
            if cancel
            else f"{name}: {'down' if down else 'stop'} after {human.minutes(minutes)} idle."
        )
    return {"clusters": names, "idle_minutes": None if cancel else minutes, "down": down}


async def run_cancel(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    name = payload["cluster_name"]
    row = await cdb.require_cluster(ctx.store, name)
    handle = cdb.handle_of(row)
    if handle is None or not agent_may_be_dead(row):
        raise ClusterStateError(f"cluster {name!r} is {row['status']}", hint="nothing runs on it")
    ids = payload.get("job_ids") or []
    row, handle, note = await answering_agents(ctx.store, name, row, handle)
    if note:
        ctx.log(note)
    prov = get_cloud(handle.cloud).provisioner()
    finished: dict[int, str] = {}
    async with agent(prov, handle) as c:
        if not payload.get("all") and ids:
            known = {int(j["job_id"]): str(j["status"]) for j in await c.job_queue()}
            missing = [i for i in ids if int(i) not in known]
            if missing:
                raise NotFoundError(
                    f"job(s) {', '.join(map(str, missing))} not found on cluster {name!r}",
                    hint=f"`skyd queue {name}` lists its jobs",
                )
            finished = {int(i): known[int(i)] for i in ids if known[int(i)] in cdb.TERMINAL_JOB}
        cancelled = await c.cancel_jobs(None if payload.get("all") else [int(i) for i in ids])
        await cdb.upsert_jobs(ctx.store, name, await c.job_queue())
    for jid, status in finished.items():
        ctx.log(f"Job {jid} on {name} had already finished ({status}); nothing to cancel.")
    if cancelled or not finished:
        ctx.log(f"Cancelled job(s) {', '.join(map(str, cancelled)) or 'none'} on {name}.")
    return {"cluster": name, "cancelled": cancelled,
            "already_finished": {str(k): v for k, v in finished.items()}}


def agent_may_be_dead(row: dict[str, Any]) -> bool:
    """UP, or marked unhealthy (INIT with a handle) by a refresh that found its agent dead."""
    return bool(row.get("handle")) and (
        row["status"] == cdb.UP
        or (row["status"] == cdb.INIT and str(row.get("status_reason") or "").startswith("unhealthy"))
    )


async def answering_agents(
    store: Any, name: str, row: dict[str, Any], handle: Any
) -> tuple[dict[str, Any], Any, str | None]:
    """(row, handle, note) for a cluster whose agents answer. A dead agent (killed, OOM,
    crashed) is noticed here and restarted (its jobs' processes and records are adopted by
    the new agent); `note` then says so. When it cannot be restarted the cluster is marked
    unhealthy and a ClusterStateError names what to do."""
    prov = get_cloud(handle.cloud).provisioner()
    if await agent_healthy(prov, handle):
        return row, handle, None
    fresh = await refresh_cluster(store, name, repair=True)
    new_handle = cdb.handle_of(fresh) if fresh else None
    if fresh is not None and fresh["status"] == cdb.UP and new_handle is not None:
        return fresh, new_handle, (
            f"the node agent of cluster {name!r} was not running; restarted it"
        )
    why = (fresh or {}).get("status_reason") or (
        f"the cluster is {fresh['status']}" if fresh else "the cluster is gone")
    raise ClusterStateError(
        f"the node agent of cluster {name!r} is not running and could not be restarted ({why})",
        hint=f"`skyd status -r {name}` re-checks it; `skyd down {name}` removes the cluster",
    )


async def _targets(store: Any, payload: dict[str, Any]) -> list[str]:
    if payload.get("all"):
        return [r["name"] for r in await store.fetchall("SELECT name FROM clusters ORDER BY name")]
    names = list(payload.get("clusters") or ([payload["cluster_name"]] if payload.get("cluster_name") else []))
    if not names:
        raise NotFoundError("no cluster named", hint="give cluster names or -a for all")
    for n in names:
        await cdb.require_cluster(store, n)
    return names


async def refresh_cluster(store: Any, name: str, *, repair: bool) -> dict[str, Any] | None:
    """Ask the provider and the agents what the cluster really is; update the row.

    INIT (unhealthy) when a node's agent does not answer; `repair` restarts such agents
    (`status -r`). A cluster the provider reports gone is removed (history kept); an agent
    that stopped itself (autostop) shows STOPPED, or is torn down when autostop said down.
    """
    row = await cdb.get_cluster(store, name)
    if row is None:
        return None
    handle = cdb.handle_of(row)
    if handle is None:
        return row
    prov = get_cloud(handle.cloud).provisioner()
    states = await prov.query(handle)
    if all(s in (NODE_TERMINATED, NODE_PREEMPTED) for s in states):
        await cdb.remove_cluster(store, name)
        return None
    if any(s == NODE_STOPPED for s in states):
        if row.get("autostop_down"):
            await prov.terminate(handle, _noop)
            await cdb.remove_cluster(store, name)
            return None
        if row["status"] != cdb.STOPPED:
            await cdb.set_status(store, name, cdb.STOPPED, "autostopped")
        return await cdb.get_cluster(store, name)
    if all(s == NODE_RUNNING for s in states):
        queue: list[list[dict[str, Any]]] = []

        async def head_queue(c: Any) -> None:  # on the head's Health connection
            queue.append(await c.job_queue())

        try:
            if repair:  # only `status -r` restarts agents; the refresher only looks
                handle = await prov.ensure_agents(handle, _noop)
            healthy = await agent_healthy(prov, handle, head=head_queue)
        except Exception:  # noqa: BLE001 - an agent that cannot be reached is unhealthy
            healthy = False
        if healthy:
            await cdb.save_handle(store, handle, cdb.UP)
            if queue:
                try:
                    await cdb.upsert_jobs(store, name, queue[0])
                except Exception:  # noqa: BLE001, S110 - the mirror is best effort
                    pass
            return await cdb.get_cluster(store, name)
    if repair and row["status"] != cdb.STOPPED:
        try:
            handle = await prov.ensure_agents(handle, _noop)
            if await agent_healthy(prov, handle):
                await cdb.save_handle(store, handle, cdb.UP)
                return await cdb.get_cluster(store, name)
        except Exception as e:  # noqa: BLE001 - report unhealthy below
            await cdb.set_status(store, name, cdb.INIT, f"unhealthy: {e}")
            return await cdb.get_cluster(store, name)
    if row["status"] == cdb.UP:
        why = ("a node is stopping or starting" if NODE_PENDING in states
               else "unhealthy: node agent not answering")
        await cdb.set_status(store, name, cdb.INIT, why)
    return await cdb.get_cluster(store, name)
