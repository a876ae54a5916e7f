"""Cluster and cluster-job rows in the daemon's SQLite (the lower state machine's mirror).

Every change is one transaction written before it is reported. The handle (with the agent
token) is stored in `clusters.handle`; only `public_*` views leave the daemon.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from skyd.clouds.base import ClusterHandle, PartialHandle
from skyd.daemon.owners import current_user
from skyd.errors import NotFoundError
from skyd.pipeline import schema as _schema  # noqa: F401 - registers the tables

INIT, UP, STOPPED = "INIT", "UP", "STOPPED"

# Set by the daemon plugin at start: publishes state changes on the daemon's event bus
# (topics "clusters" and "jobs"), which `GET /v1/watch` streams to the TUI.
_publish: Callable[[str, dict[str, Any]], None] | None = None


def set_publisher(fn: Callable[[str, dict[str, Any]], None] | None) -> None:
    global _publish
    _publish = fn


def _changed(topic: str, data: dict[str, Any]) -> None:
    if _publish is not None:
        _publish(topic, data)
TERMINAL_JOB = {"SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED"}
_TERMINAL_SQL = ", ".join(f"'{s}'" for s in sorted(TERMINAL_JOB))  # constants, not input


def _row(r: Any) -> dict[str, Any]:
    return dict(r) if r is not None else {}


async def get_cluster(store: Any, name: str) -> dict[str, Any] | None:
    r = await store.fetchone("SELECT * FROM clusters WHERE name = ?", (name,))
    return _row(r) if r is not None else None


async def require_cluster(store: Any, name: str) -> dict[str, Any]:
    row = await get_cluster(store, name)
    if row is None:
        names = [r["name"] for r in await store.fetchall("SELECT name FROM clusters")]
        import difflib

        close = difflib.get_close_matches(name, names, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "see `skyd status` for clusters"
        raise NotFoundError(f"cluster {name!r} does not exist", hint=hint)
    return row


def handle_of(row: dict[str, Any]) -> ClusterHandle | None:
    text = row.get("handle")
    return ClusterHandle.from_json(text) if text else None


async def insert_init(
    store: Any, name: str, *, request_id: str, resources: dict[str, Any], num_nodes: int,
    partial: PartialHandle | None = None,
) -> None:
    """The INIT row of a provisioning attempt. With `partial`, the row is the partial handle
    (cloud, region, zone, tag), written in this one transaction before the first create."""
    now = time.time()
    loc = (partial.cloud, partial.region, partial.zone, partial.tag) if partial else (None,) * 4
    async with store.tx() as db:
        await db.execute(
            "INSERT INTO clusters (name, status, num_nodes, resources, request_id, launched_at,"
            " status_updated_at, last_use, cloud, region, zone, tag, user)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(name) DO UPDATE SET status = excluded.status,"
            " request_id = excluded.request_id, status_updated_at = excluded.status_updated_at,"
            " resources = excluded.resources, cloud = excluded.cloud,"
            " region = excluded.region, zone = excluded.zone, tag = excluded.tag,"
            " user = COALESCE(clusters.user, excluded.user)",
            (name, INIT, num_nodes, json.dumps(resources), request_id, now, now, now, *loc,
             current_user()),
        )
    _changed("clusters", {"name": name, "status": INIT})


def partial_of(row: dict[str, Any]) -> PartialHandle | None:
    """The partial handle of an INIT row whose provisioning never produced a handle (None
    when it has a handle, or when it was not written by a provisioning attempt: no tag)."""
    if row.get("handle") or not row.get("cloud") or not row.get("tag") or row.get("status") != INIT:
        return None
    return PartialHandle(str(row["name"]), str(row["cloud"]), row.get("region"), row.get("zone"),
                         str(row["tag"]))


async def half_made(store: Any) -> list[PartialHandle]:
    """Every cluster row that is only a partial handle (a provisioning in flight, or one a
    killed daemon left)."""
    rows = await store.fetchall(
        "SELECT * FROM clusters WHERE handle IS NULL AND cloud IS NOT NULL AND tag IS NOT NULL"
        " AND status = ?", (INIT,))
    return [p for p in (partial_of(dict(r)) for r in rows) if p is not None]


async def _bill(db: Any, name: str, status: str, now: float) -> None:
    """Usage accounting, inside the transaction that changes the status: a cluster is billed
    while its nodes exist and are not stopped (UP, or INIT when unhealthy)."""
    cur = await db.execute("SELECT up_since FROM clusters WHERE name = ?", (name,))
    row = await cur.fetchone()
    if row is None:
        return
    up_since = row[0]
    if status == STOPPED and up_since is not None:
        await db.execute(
            "UPDATE clusters SET billed_s = billed_s + ?, up_since = NULL WHERE name = ?",
            (max(0.0, now - float(up_since)), name),
        )
    elif status != STOPPED and up_since is None:
        await db.execute("UPDATE clusters SET up_since = ? WHERE name = ?", (now, name))


def billed_seconds(row: dict[str, Any], now: float | None = None) -> float:
    """Seconds of billable use so far (stopped periods excluded)."""
    now = time.time() if now is None else now
    up = row.get("up_since")
    return float(row.get("billed_s") or 0.0) + (max(0.0, now - float(up)) if up else 0.0)


async def save_handle(store: Any, handle: ClusterHandle, status: str, reason: str = "") -> None:
    now = time.time()
    async with store.tx() as db:
        await db.execute(
            "UPDATE clusters SET status = ?, cloud = ?, region = ?, zone = ?, instance_type = ?,"
            " accelerators = ?, num_nodes = ?, use_spot = ?, hourly_cost = ?, handle = ?,"
            " status_updated_at = ?, status_reason = ?, tag = ? WHERE name = ?",
            (
                status,
                handle.cloud,
                handle.region,
                handle.zone,
                handle.instance_type,
                json.dumps(handle.accelerators),
                handle.num_nodes,
                int(handle.use_spot),
                handle.hourly_cost,
                handle.to_json(),
                now,
                reason,
                handle.cluster_tag,
                handle.cluster_name,
            ),
        )
        await _bill(db, handle.cluster_name, status, now)
    _changed("clusters", {"name": handle.cluster_name, "status": status})
    from skyd.pipeline import sshconfig

    await sshconfig.write(handle)  # `ssh NAME`: addresses may have changed


async def set_status(store: Any, name: str, status: str, reason: str = "") -> None:
    now = time.time()
    async with store.tx() as db:
        await db.execute(
            "UPDATE clusters SET status = ?, status_reason = ?, status_updated_at = ?"
            " WHERE name = ?",
            (status, reason, now, name),
        )
        if status != INIT:  # INIT here means "unhealthy": its nodes still exist (billed)
            await _bill(db, name, status, now)
    _changed("clusters", {"name": name, "status": status})


async def set_autostop(store: Any, name: str, minutes: float | None, down: bool) -> None:
    async with store.tx() as db:
        await db.execute(
            "UPDATE clusters SET autostop_minutes = ?, autostop_down = ? WHERE name = ?",
            (minutes, int(down), name),
        )
    _changed("clusters", {"name": name, "autostop_minutes": minutes})


async def touch(store: Any, name: str) -> None:
    async with store.tx() as db:
        await db.execute("UPDATE clusters SET last_use = ? WHERE name = ?", (time.time(), name))


async def remove_cluster(store: Any, name: str) -> None:
    """Delete the row and append its lifetime to cluster_history, in one transaction."""
    row = await get_cluster(store, name)
    if row is None:
        return
    now = time.time()
    launched = float(row.get("launched_at") or now)
    duration = billed_seconds(row, now)  # stopped periods cost nothing
    cost = float(row.get("hourly_cost") or 0.0) * duration / 3600.0
    async with store.tx() as db:
        if row.get("handle"):
            await db.execute(
                "INSERT INTO cluster_history (name, cloud, region, zone, instance_type,"
                " accelerators, num_nodes, use_spot, hourly_cost, launched_at, ended_at,"
                " duration_s, cost, user) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    name,
                    row.get("cloud"),
                    row.get("region"),
                    row.get("zone"),
                    row.get("instance_type"),
                    row.get("accelerators"),
                    row.get("num_nodes"),
                    row.get("use_spot"),
                    row.get("hourly_cost"),
                    launched,
                    now,
                    duration,
                    cost,
                    row.get("user"),
                ),
            )
        await db.execute("DELETE FROM clusters WHERE name = ?", (name,))
        await db.execute("DELETE FROM cluster_jobs WHERE cluster = ?", (name,))
    _changed("clusters", {"name": name, "status": "TERMINATED", "user": row.get("user")})
    from skyd.pipeline import sshconfig

    await sshconfig.remove(name)  # `ssh NAME` goes with the cluster


async def upsert_jobs(store: Any, cluster: str, jobs: list[dict[str, Any]]) -> None:
    """Mirror the agent's job queue rows into cluster_jobs. A snapshot read earlier (the
    refresher's, racing a `queue` that read later) never moves a job back: a row that is
    already terminal is not overwritten by a non-terminal one (job ids are never reused)."""
    if not jobs:
        return
    async with store.tx() as db:
        for j in jobs:
            await db.execute(
                "INSERT INTO cluster_jobs (cluster, job_id, name, status, submitted_at,"
                " started_at, ended_at, exit_code, resources, username, log_path)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT(cluster, job_id) DO UPDATE SET name = excluded.name,"
                " status = excluded.status, started_at = excluded.started_at,"
                " ended_at = excluded.ended_at, exit_code = excluded.exit_code"
                f" WHERE cluster_jobs.status NOT IN ({_TERMINAL_SQL})"
                f" OR excluded.status IN ({_TERMINAL_SQL})",
                (
                    cluster,
                    int(j["job_id"]),
                    j.get("name"),
                    j.get("status"),
                    j.get("submitted_at"),
                    j.get("started_at", j.get("start_at")),
                    j.get("ended_at", j.get("end_at")),
                    j.get("exit_code"),
                    j.get("resources"),
                    j.get("username"),
                    j.get("log_path"),
                ),
            )
    _changed("jobs", {"cluster": cluster, "jobs": [(j["job_id"], j.get("status")) for j in jobs]})


STATUS_SQL = (
    "SELECT name, status, cloud, region, zone, instance_type, accelerators, num_nodes, "
    "use_spot, hourly_cost, launched_at, status_updated_at, autostop_minutes, autostop_down, "
    "resources, last_use, request_id, status_reason FROM clusters ORDER BY name"
)
_BOOL_COLS = ("use_spot", "autostop_down")


async def status_rows(store: Any) -> list[dict[str, Any]]:
    """The clusters as ``GET /v1/status`` lists them (no handle, no token)."""
    rows = await store.fetchall(STATUS_SQL, json_cols=("accelerators", "resources"))
    for r in rows:
        for c in _BOOL_COLS:
            if r[c] is not None:
                r[c] = bool(r[c])
        r["last_use"] = _epoch(r.get("last_use"))
    return rows


def _epoch(v: Any) -> float | None:
    """A timestamp column as a number (``last_use`` is a TEXT column in older schemas)."""
    try:
        return None if v in (None, "") else float(v)
    except (TypeError, ValueError):
        return None


async def list_jobs(store: Any, cluster: str) -> list[dict[str, Any]]:
    rows = await store.fetchall(
        "SELECT * FROM cluster_jobs WHERE cluster = ? ORDER BY job_id DESC", (cluster,)
    )
    return [_row(r) for r in rows]


def public_cluster(row: dict[str, Any]) -> dict[str, Any]:
    """The status view of a cluster row: no handle, no token."""
    accs = json.loads(row["accelerators"]) if row.get("accelerators") else {}
    infra = "/".join(p for p in (row.get("cloud"), row.get("region"), row.get("zone")) if p)
    res = row.get("resources")
    return {
        "name": row["name"],
        "status": row["status"],
        "status_reason": row.get("status_reason") or "",
        "infra": infra,
        "cloud": row.get("cloud"),
        "region": row.get("region"),
        "zone": row.get("zone"),
        "instance_type": row.get("instance_type"),
        "accelerators": accs,
        "num_nodes": row.get("num_nodes"),
        "use_spot": bool(row.get("use_spot")),
        "hourly_cost": row.get("hourly_cost") or 0.0,
        "launched_at": row.get("launched_at"),
        "autostop_minutes": row.get("autostop_minutes"),
        "autostop_down": bool(row.get("autostop_down")),
        "last_use": float(row["last_use"]) if row.get("last_use") not in (None, "") else None,
        "resources": json.loads(res) if res else None,
        **_addresses(row),
    }


def _addresses(row: dict[str, Any]) -> dict[str, Any]:
    """The nodes' addresses (`status --ip`, `--endpoints`): the head's reachable one (its
    external address, else its internal one) and every node's internal one."""
    try:
        h = handle_of(row)
    except (ValueError, TypeError, KeyError):
        h = None
    if h is None or not h.nodes:
        return {"head_ip": None, "node_ips": [], "external_ips": [], "node_dirs": []}
    return {"head_ip": h.head.external_ip or h.head.internal_ip or None,
            "node_ips": [n.internal_ip for n in h.nodes],
            "external_ips": [n.external_ip for n in h.nodes],
            "node_dirs": [n.node_dir for n in h.nodes]}
