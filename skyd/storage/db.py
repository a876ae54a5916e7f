"""The buckets skyd created (table ``storage_buckets``, skyd.storage.schema). Only these are ever
listed by ``skyd storage ls`` or deleted; a row is written (state CREATING) before the
create call, so a crash between the two still leaves a record to clean up."""

from __future__ import annotations

import time
from typing import Any

from skyd.daemon.owners import current_user
from skyd.storage import schema as _schema  # noqa: F401 - registers the table

CREATING, READY = "CREATING", "READY"


async def record(store: Any, name: str, kind: str, *, persistent: bool, cluster: str | None,
                 source: str | None) -> None:
    async with store.tx() as db:
        await db.execute(
            "INSERT INTO storage_buckets (name, store, persistent, cluster, source, status,"
            " created_at, user) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO NOTHING",
            (name, kind, int(persistent), cluster, source, CREATING, time.time(),
             current_user()))


async def mark_ready(store: Any, name: str) -> None:
    await store.execute("UPDATE storage_buckets SET status = ? WHERE name = ?", (READY, name))


async def get(store: Any, name: str) -> dict[str, Any] | None:
    r = await store.fetchone("SELECT * FROM storage_buckets WHERE name = ?", (name,))
    return dict(r) if r is not None else None


async def list_all(store: Any) -> list[dict[str, Any]]:
    rows = await store.fetchall("SELECT * FROM storage_buckets ORDER BY created_at")
    return [{**r, "persistent": bool(r["persistent"])} for r in rows]


async def of_cluster(store: Any, cluster: str) -> list[dict[str, Any]]:
    return await store.fetchall(
        "SELECT * FROM storage_buckets WHERE cluster = ? AND persistent = 0", (cluster,))


async def forget(store: Any, name: str) -> None:
    await store.execute("DELETE FROM storage_buckets WHERE name = ?", (name,))
