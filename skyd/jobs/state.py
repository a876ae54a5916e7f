"""Persistence for managed jobs: their rows in the state store, one transaction per
transition.

`JobsDB` reads and writes the `managed_jobs` and `managed_job_attempts` tables (the `jobs`
component of the schema, skyd.jobs.schema) through a :class:`~skyd.daemon.store.Store`.
Every write method is a single `Store.write` transaction, shielded from cancellation so a
transition is either fully on disk or not at all, and committed before the caller acts on
it. Controller writes are conditional on the job still being active (`only_active`): a
cancel (which moves the row to CANCELLING first) always wins a race with a controller
transition.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio

from skyd.daemon.owners import current_user
from skyd.daemon.store import KV, Store
from skyd.jobs import schema as _schema  # noqa: F401 - registers the tables
from skyd.jobs.status import ACTIVE, TERMINAL

T = TypeVar("T")

JOB_COLUMNS: tuple[str, ...] = (
    "id", "name", "status", "schedule_state", "priority", "submitted_at", "started_at",
    "ended_at", "recoveries", "restarts", "failure_reason", "dag", "strategy", "current_task",
    "cluster", "cluster_job_id", "last_region", "updated_at",
    "retry_until_up", "exit_code", "last_cloud", "last_zone",
)  # fmt: skip
ATTEMPT_COLUMNS: tuple[str, ...] = (
    "job_id", "task_index", "attempt", "cluster", "cluster_job_id", "cloud", "region", "zone",
    "status", "started_at", "ended_at", "exit_code", "reason",
)  # fmt: skip


_ACTIVE_SQL = ",".join(f"'{s}'" for s in sorted(ACTIVE))
_TERMINAL_SQL = ",".join(f"'{s}'" for s in sorted(TERMINAL))
_QUEUE_COLUMNS = ",".join(c for c in JOB_COLUMNS if c != "dag")


def _check_cols(names: Iterable[str], allowed: Sequence[str]) -> None:
    bad = [n for n in names if n not in allowed]
    if bad:
        raise ValueError(f"unknown column(s) {bad}")


# Set by the daemon plugin: publishes managed-job changes on the daemon's event bus
# (topic "managed_jobs"), which `GET /v1/watch` streams to the TUI.
_publish: Callable[[str, dict[str, Any]], None] | None = None


def set_publisher(fn: Callable[[str, dict[str, Any]], None] | None) -> None:
    global _publish
    _publish = fn


def _changed(data: dict[str, Any]) -> None:
    if _publish is not None:
        _publish("managed_jobs", data)


class JobsDB:
    """The managed-jobs tables of one state store (writes serialized by its lock)."""

    def __init__(self, store: Store, *, owned: bool = False) -> None:
        """Use ``store`` (open); ``owned``: :meth:`close` closes it too."""
        self.store = store
        self._owned = owned
        self.transitions = 0  # committed write transactions (benchmarks read this)

    @classmethod
    async def open(cls, path: str | Path, *, lock: anyio.Lock | None = None) -> JobsDB:
        """Open a store of its own at `path` (created and migrated as needed). Another
        store's ``write_lock`` as `lock` keeps the two from contending for SQLite's write
        lock inside one process; the daemon passes its own store to the constructor."""
        store = Store(path, write_lock=lock)
        await store.open()
        return cls(store, owned=True)

    async def close(self) -> None:
        if self._owned:
            await self.store.close()

    # -- writes ---------------------------------------------------------------------------

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run fn(conn) as one shielded write transaction (Store.write)."""
        result = await self.store.write(fn)
        self.transitions += 1
        return result

    async def fetchall(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return await self.store.fetchall(sql, args)

    async def fetchone(self, sql: str, args: Sequence[Any] = ()) -> dict[str, Any] | None:
        return await self.store.fetchone(sql, args)

    async def create_job(
        self,
        *,
        name: str | None,
        dag_json: str,
        strategy: str | None,
        priority: int = 0,
        retry_until_up: bool = False,
        request_key: str | None = None,
    ) -> int:
        """Insert a PENDING job. With `request_key`, the id is recorded under that key in the same transaction and a second call with the
        key returns it: a request resumed after a crash never creates the job twice."""
        now = time.time()
        user = current_user()

        def fn(db: sqlite3.Connection) -> int:
            if request_key is not None:
                known = KV.get_sync(db, request_key)
                if known is not None:
                    return int(known)
            cur = db.execute(
                "INSERT INTO managed_jobs (name, status, schedule_state, priority, submitted_at,"
                " dag, strategy, current_task, updated_at, retry_until_up, user)"
                " VALUES (?, 'PENDING', 'WAITING', ?, ?, ?, ?, 0, ?, ?, ?)",
                (name, priority, now, dag_json, strategy, now, int(retry_until_up), user),
            )
            assert cur.lastrowid is not None
            if request_key is not None:
                KV.put_sync(db, request_key, int(cur.lastrowid))
            return int(cur.lastrowid)

        jid = await self.write(fn)
        _changed({"id": jid, "status": "PENDING"})
        return jid

    async def update_job(
        self,
        job_id: int,
        fields: dict[str, Any],
        *,
        only_active: bool = True,
        only_status: Sequence[str] | None = None,
        attempt_insert: dict[str, Any] | None = None,
        attempt_update: tuple[int, int, dict[str, Any]] | None = None,
        increment: Sequence[str] = (),
    ) -> bool:
        """One transition. Returns False (and writes nothing) when the row is no longer in
        an allowed state (active by default, or `only_status`)."""
        _check_cols(fields, JOB_COLUMNS)
        _check_cols(increment, ("recoveries", "restarts"))
        if attempt_insert:
            _check_cols(attempt_insert, ATTEMPT_COLUMNS)
        if attempt_update:
            _check_cols(attempt_update[2], ATTEMPT_COLUMNS)
        sets = [f"{k}=?" for k in fields] + [f"{k}={k}+1" for k in increment] + ["updated_at=?"]
        params: list[Any] = [*fields.values(), time.time(), job_id]
        where = "id=?"
        if only_status is not None:
            where += " AND status IN (" + ",".join("?" * len(only_status)) + ")"
            params += list(only_status)
        elif only_active:
            where += f" AND status IN ({_ACTIVE_SQL})"
        sql = f"UPDATE managed_jobs SET {','.join(sets)} WHERE {where}"

        def fn(db: sqlite3.Connection) -> bool:
            cur = db.execute(sql, params)
            if cur.rowcount != 1:
                return False
            if attempt_insert:
                cols = ",".join(attempt_insert)
                db.execute(
                    f"INSERT INTO managed_job_attempts ({cols}) VALUES"
                    f" ({','.join('?' * len(attempt_insert))})",
                    list(attempt_insert.values()),
                )
            if attempt_update:
                ti, att, af = attempt_update
                if af:
                    db.execute(
                        f"UPDATE managed_job_attempts SET {','.join(f'{k}=?' for k in af)}"
                        " WHERE job_id=? AND task_index=? AND attempt=?",
                        [*af.values(), job_id, ti, att],
                    )
            return True

        ok = await self.write(fn)
        if ok:
            _changed({"id": job_id, **{k: v for k, v in fields.items() if k in ("status", "cluster")}})
        return ok

    async def request_cancel(self, job_id: int) -> str | None:
        """Move an active job to CANCELLING (its controller, or resume_all, finishes the
        cancel). Returns the status it had, or None when it was already ending."""

        def fn(db: sqlite3.Connection) -> str | None:
            row = db.execute("SELECT status FROM managed_jobs WHERE id=?", (job_id,)).fetchone()
            if row is None or row[0] not in ACTIVE:
                return None
            db.execute(
                "UPDATE managed_jobs SET status='CANCELLING', updated_at=? WHERE id=?",
                (time.time(), job_id),
            )
            return str(row[0])

        prev = await self.write(fn)
        if prev is not None:
            _changed({"id": job_id, "status": "CANCELLING"})
        return prev

    # -- reads ----------------------------------------------------------------------------

    async def get_job(self, job_id: int) -> dict[str, Any] | None:
        return await self.fetchone("SELECT * FROM managed_jobs WHERE id=?", (job_id,))

    async def list_jobs(
        self,
        *,
        skip_finished: bool = False,
        statuses: Sequence[str] | None = None,
        ids: Sequence[int] | None = None,
        name: str | None = None,
    ) -> list[dict[str, Any]]:
        where: list[str] = []
        params: list[Any] = []
        if skip_finished:
            where.append(f"status NOT IN ({_TERMINAL_SQL})")
        if statuses:
            where.append("status IN (" + ",".join("?" * len(statuses)) + ")")
            params += [s.upper() for s in statuses]
        if ids:
            where.append("id IN (" + ",".join("?" * len(ids)) + ")")
            params += list(ids)
        if name is not None:
            where.append("name=?")
            params.append(name)
        sql = f"SELECT {_QUEUE_COLUMNS} FROM managed_jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC"
        return await self.fetchall(sql, params)

    async def unfinished_or_dirty(self) -> list[dict[str, Any]]:
        """Jobs a restarted daemon must look at: non-terminal ones, and terminal ones whose
        cluster was not confirmed torn down (cluster column still set)."""
        return await self.fetchall(
            f"SELECT * FROM managed_jobs WHERE status NOT IN ({_TERMINAL_SQL})"
            " OR cluster IS NOT NULL ORDER BY id"
        )

    async def attempts(self, job_id: int) -> list[dict[str, Any]]:
        return await self.fetchall(
            "SELECT * FROM managed_job_attempts WHERE job_id=? ORDER BY task_index, attempt",
            (job_id,),
        )

    async def last_attempt(self, job_id: int, task_index: int) -> dict[str, Any] | None:
        return await self.fetchone(
            "SELECT * FROM managed_job_attempts WHERE job_id=? AND task_index=?"
            " ORDER BY attempt DESC LIMIT 1",
            (job_id, task_index),
        )
