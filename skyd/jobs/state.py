"""Persistence for managed jobs: plain aiosqlite, one transaction per transition.

`JobsDB` owns the `managed_jobs` and `managed_job_attempts` tables. Every write method is a
single `BEGIN IMMEDIATE … COMMIT`, shielded from cancellation so a transition is either
fully on disk or not at all, and committed before the caller acts on it. Controller writes
are conditional on the job still being active (`only_active`): a cancel (which moves the row
to CANCELLING first) always wins a race with a controller transition.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import anyio

from skyd.daemon.owners import current_user
from skyd.daemon.schema import POOL_SCHEMA
from skyd.jobs.status import ACTIVE, TERMINAL

T = TypeVar("T")

JOB_COLUMNS: tuple[str, ...] = (
    "id", "name", "status", "schedule_state", "priority", "submitted_at", "started_at",
    "ended_at", "recoveries", "restarts", "failure_reason", "dag", "strategy", "current_task",
    "cluster", "cluster_job_id", "last_region", "updated_at",
    # additions (the daemon's migration must include these):
    "retry_until_up", "exit_code", "last_cloud", "last_zone",
)  # fmt: skip
ATTEMPT_COLUMNS: tuple[str, ...] = (
    "job_id", "task_index", "attempt", "cluster", "cluster_job_id", "cloud", "region", "zone",
    "status", "started_at", "ended_at", "exit_code", "reason",
)  # fmt: skip

SCHEMA = """
CREATE TABLE IF NOT EXISTS managed_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT,
    status TEXT NOT NULL,
    schedule_state TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    submitted_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    recoveries INTEGER NOT NULL DEFAULT 0,
    restarts INTEGER NOT NULL DEFAULT 0,
    failure_reason TEXT,
    dag TEXT NOT NULL,
    strategy TEXT,
    current_task INTEGER NOT NULL DEFAULT 0,
    cluster TEXT,
    cluster_job_id INTEGER,
    last_region TEXT,
    updated_at REAL,
    retry_until_up INTEGER NOT NULL DEFAULT 0,
    exit_code INTEGER,
    last_cloud TEXT,
    last_zone TEXT
);
CREATE INDEX IF NOT EXISTS managed_jobs_status ON managed_jobs(status);
CREATE TABLE IF NOT EXISTS managed_job_attempts (
    job_id INTEGER NOT NULL,
    task_index INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    cluster TEXT,
    cluster_job_id INTEGER,
    cloud TEXT,
    region TEXT,
    zone TEXT,
    status TEXT NOT NULL,
    started_at REAL,
    ended_at REAL,
    exit_code INTEGER,
    reason TEXT,
    PRIMARY KEY (job_id, task_index, attempt)
);
"""


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


BUSY_TIMEOUT_MS = 10000
BEGIN_RETRY_S = 60.0  # another process holding the write lock this long is a real fault


def is_locked(e: BaseException) -> bool:
    return isinstance(e, sqlite3.OperationalError) and (
        "database is locked" in str(e) or "database is busy" in str(e)
    )


def begin_immediate(raw: sqlite3.Connection, budget: float = BEGIN_RETRY_S) -> None:
    """BEGIN IMMEDIATE, retried while another connection holds the write lock (SQLite's
    busy handler gives up after busy_timeout, and not at all in some WAL recovery cases
    right after a crash)."""
    deadline = time.monotonic() + budget
    delay = 0.01
    while True:
        try:
            raw.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as e:
            if not is_locked(e) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


class JobsDB:
    """The managed-jobs tables on one aiosqlite connection (writes serialized by a lock)."""

    def __init__(self, conn: aiosqlite.Connection, *, lock: anyio.Lock | None = None) -> None:
        self.conn = conn
        self.conn.row_factory = aiosqlite.Row
        self._lock = lock or anyio.Lock()
        self.transitions = 0  # committed write transactions (benchmarks read this)

    @classmethod
    async def open(cls, path: str | Path, *, lock: anyio.Lock | None = None) -> JobsDB:
        """Open the tables at `path`. In the daemon, pass the state store's write lock: the
        two connections then never contend for SQLite's write lock inside one process (a
        busy wait there starves under load and ends in "database is locked")."""
        conn = await aiosqlite.connect(str(path), isolation_level=None)
        await conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=NORMAL")
        db = cls(conn, lock=lock)
        await db.init_schema()
        return db

    async def close(self) -> None:
        await self.conn.close()

    async def init_schema(self) -> None:
        async with self._lock:
            await self.conn.executescript(SCHEMA + POOL_SCHEMA)
            await self._migrate()

    async def _migrate(self) -> None:
        """Add our extra columns to a managed_jobs table created by an older daemon schema."""
        async with self.conn.execute("PRAGMA table_info(managed_jobs)") as cur:
            have = {r[1] for r in await cur.fetchall()}
        extra = {"retry_until_up": "INTEGER NOT NULL DEFAULT 0", "exit_code": "INTEGER",
                 "last_cloud": "TEXT", "last_zone": "TEXT", "user": "TEXT"}  # fmt: skip
        for col, decl in extra.items():
            if col not in have:
                await self.conn.execute(f"ALTER TABLE managed_jobs ADD COLUMN {col} {decl}")
        async with self.conn.execute("PRAGMA table_info(job_pools)") as cur:
            if "user" not in {r[1] for r in await cur.fetchall()}:  # who made it (owners)
                await self.conn.execute("ALTER TABLE job_pools ADD COLUMN user TEXT")

    # -- writes ---------------------------------------------------------------------------

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run fn(conn) as one shielded IMMEDIATE transaction, in a single hop to aiosqlite's
        thread (fn is synchronous; it runs where the sqlite3 connection lives)."""

        def tx() -> T:
            raw: sqlite3.Connection = self.conn._conn  # noqa: SLF001 - same thread, see above
            begin_immediate(raw)
            try:
                result = fn(raw)
            except BaseException:
                raw.execute("ROLLBACK")
                raise
            raw.execute("COMMIT")
            return result

        with anyio.CancelScope(shield=True):
            async with self._lock:
                result = await self.conn._execute(tx)  # noqa: SLF001
                self.transitions += 1
                return result
        raise AssertionError("unreachable")  # pragma: no cover - the scope never swallows

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
        """Insert a PENDING job. With `request_key` (the daemon's kv table must exist), the
        id is recorded under that key in the same transaction and a second call with the
        key returns it: a request resumed after a crash never creates the job twice."""
        now = time.time()
        user = current_user()

        def fn(db: sqlite3.Connection) -> int:
            if request_key is not None:
                row = db.execute("SELECT value FROM kv WHERE key=?", (request_key,)).fetchone()
                if row is not None:
                    return int(row[0])
            cur = db.execute(
                "INSERT INTO managed_jobs (name, status, schedule_state, priority, submitted_at,"
                " dag, strategy, current_task, updated_at, retry_until_up, user)"
                " VALUES (?, 'PENDING', 'WAITING', ?, ?, ?, ?, 0, ?, ?, ?)",
                (name, priority, now, dag_json, strategy, now, int(retry_until_up), user),
            )
            assert cur.lastrowid is not None
            if request_key is not None:
                db.execute("INSERT INTO kv (key, value) VALUES (?, ?)",
                           (request_key, str(int(cur.lastrowid))))  # fmt: skip
            return int(cur.lastrowid)

        jid = await self._write(fn)
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

        ok = await self._write(fn)
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

        prev = await self._write(fn)
        if prev is not None:
            _changed({"id": job_id, "status": "CANCELLING"})
        return prev

    # -- reads ----------------------------------------------------------------------------

    async def get_job(self, job_id: int) -> dict[str, Any] | None:
        async with self.conn.execute("SELECT * FROM managed_jobs WHERE id=?", (job_id,)) as cur:
            row = await cur.fetchone()
        return dict(row) if row is not None else None

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
        async with self.conn.execute(sql, params) as cur:
            rows = await cur.fetchall()
        return [dict(r) for r in rows]

    async def unfinished_or_dirty(self) -> list[dict[str, Any]]:
        """Jobs a restarted daemon must look at: non-terminal ones, and terminal ones whose
        cluster was not confirmed torn down (cluster column still set)."""
        async with self.conn.execute(
            f"SELECT * FROM managed_jobs WHERE status NOT IN ({_TERMINAL_SQL})"
            " OR cluster IS NOT NULL ORDER BY id"
        ) as cur:
            return [dict(r) for r in await cur.fetchall()]

    async def attempts(self, job_id: int) -> list[dict[str, Any]]:
        async with self.conn.execute(
            "SELECT * FROM managed_job_attempts WHERE job_id=? ORDER BY task_index, attempt",
            (job_id,),
        ) as cur:
            return [dict(r) for r in await cur.fetchall()]

    async def last_attempt(self, job_id: int, task_index: int) -> dict[str, Any] | None:
        async with self.conn.execute(
            "SELECT * FROM managed_job_attempts WHERE job_id=? AND task_index=?"
            " ORDER BY attempt DESC LIMIT 1",
            (job_id, task_index),
        ) as cur:
            row = await cur.fetchone()
        return dict(row) if row is not None else None
