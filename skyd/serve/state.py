"""Services and replicas in the daemon's SQLite (tables `services`, `replicas`).

Every transition is one transaction, written before the controller acts on it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from skyd.daemon.owners import current_user
from skyd.serve import schema as _schema  # noqa: F401 - registers the tables
from skyd.serve import status as st

SERVICE_JSON = ("spec",)


class ServeDB:
    def __init__(self, store: Any) -> None:
        self.store = store

    # -- services -------------------------------------------------------------------
    async def create_service(self, name: str, spec: dict[str, Any], lb_port: int,
                             endpoint: str) -> bool:
        """Insert the row; False when a service of that name exists."""
        now = time.time()
        async with self.store.tx() as db:
            cur = await db.execute("SELECT 1 FROM services WHERE name = ?", (name,))
            if await cur.fetchone() is not None:
                return False
            await db.execute(
                "INSERT INTO services (name, status, spec, created_at, endpoint, lb_port,"
                " version, updated_at, status_reason, user) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (name, st.CONTROLLER_INIT, json.dumps(spec), now, endpoint, lb_port, 1, now, None,
                 current_user()))
        return True

    async def get_service(self, name: str) -> dict[str, Any] | None:
        return await self.store.fetchone("SELECT * FROM services WHERE name = ?", (name,),
                                         json_cols=SERVICE_JSON)  # fmt: skip

    async def services(self) -> list[dict[str, Any]]:
        return await self.store.fetchall("SELECT * FROM services ORDER BY created_at",
                                         json_cols=SERVICE_JSON)  # fmt: skip

    async def set_service_status(self, name: str, status: str, reason: str | None = None) -> None:
        async with self.store.tx() as db:
            await db.execute(
                "UPDATE services SET status = ?, status_reason = ?, updated_at = ? WHERE name = ?"
                " AND (status != ? OR ? = ?)",
                (status, reason, time.time(), name, st.SHUTTING_DOWN, status, st.SHUTTING_DOWN))

    async def update_spec(self, name: str, spec: dict[str, Any]) -> int:
        async with self.store.tx() as db:
            await db.execute("UPDATE services SET spec = ?, version = version + 1, updated_at = ?"
                             " WHERE name = ?", (json.dumps(spec), time.time(), name))
            cur = await db.execute("SELECT version FROM services WHERE name = ?", (name,))
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def delete_service(self, name: str) -> None:
        async with self.store.tx() as db:
            await db.execute("DELETE FROM replicas WHERE service = ?", (name,))
            await db.execute("DELETE FROM services WHERE name = ?", (name,))

    # -- replicas -------------------------------------------------------------------
    async def replicas(self, service: str) -> list[dict[str, Any]]:
        return await self.store.fetchall(
            "SELECT * FROM replicas WHERE service = ? ORDER BY replica_id", (service,))

    async def new_replica(self, service: str, version: int, port: int | None) -> dict[str, Any]:
        now = time.time()
        async with self.store.tx() as db:
            cur = await db.execute(
                "SELECT COALESCE(MAX(replica_id), 0) FROM replicas WHERE service = ?", (service,))
            row = await cur.fetchone()
            rid = int(row[0]) + 1 if row else 1
            cluster = f"sv-{service}-{rid}"
            await db.execute(
                "INSERT INTO replicas (service, replica_id, status, cluster, url, version,"
                " created_at, updated_at, port) VALUES (?,?,?,?,?,?,?,?,?)",
                (service, rid, st.PENDING, cluster, None, version, now, now, port))
        r = await self.store.fetchone(
            "SELECT * FROM replicas WHERE service = ? AND replica_id = ?", (service, rid))
        assert r is not None
        return r

    async def update_replica(self, service: str, rid: int, **cols: Any) -> None:
        cols["updated_at"] = time.time()
        sets = ", ".join(f"{k} = ?" for k in cols)
        async with self.store.tx() as db:
            await db.execute(f"UPDATE replicas SET {sets} WHERE service = ? AND replica_id = ?",
                             (*cols.values(), service, rid))

    async def delete_replica(self, service: str, rid: int) -> None:
        async with self.store.tx() as db:
            await db.execute("DELETE FROM replicas WHERE service = ? AND replica_id = ?",
                             (service, rid))

    # -- preemptions (the spot placer's memory; table from skyd.serve.schema) ----------

    async def record_preemption(self, service: str, cloud: str, region: str | None,
                                zone: str | None) -> None:
        async with self.store.tx() as db:
            await db.execute("INSERT INTO serve_preemptions VALUES (?,?,?,?,?)",
                             (service, cloud, region, zone, time.time()))

    async def recent_preemptions(self, service: str, since: float) -> list[tuple[str, str | None, str | None]]:
        """(cloud, region, zone) of the service's preemptions after `since`; older rows go."""
        async with self.store.tx() as db:
            await db.execute("DELETE FROM serve_preemptions WHERE at < ?", (since,))
            cur = await db.execute("SELECT cloud, region, zone FROM serve_preemptions"
                                   " WHERE service = ? ORDER BY at", (service,))
            rows = await cur.fetchall()
        return [(str(r[0]), r[1], r[2]) for r in rows]
