"""SQLite schema, as an append-only list of migrations.

``MIGRATIONS[i]`` takes the database from ``PRAGMA user_version = i`` to ``i + 1``. A
migration is either an SQL script (str) or an async callable taking the aiosqlite
connection (for data migrations). Never edit a released migration: append a new one.
Each runs in its own transaction together with the ``user_version`` bump.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

Migration = str | Callable[[Any], Awaitable[None]]

_V1 = """
CREATE TABLE requests (
    id TEXT PRIMARY KEY,
    verb TEXT NOT NULL,
    status TEXT NOT NULL,             -- PENDING|RUNNING|SUCCEEDED|FAILED|CANCELLED
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    payload TEXT,                     -- JSON
    result TEXT,                      -- JSON
    error TEXT,                       -- JSON (SkydError.to_dict())
    stages TEXT,                      -- JSON list
    pid INTEGER,                      -- daemon pid that ran it
    cluster_name TEXT
);
CREATE INDEX requests_status ON requests(status);
CREATE INDEX requests_created ON requests(created_at);

CREATE TABLE clusters (
    name TEXT PRIMARY KEY,
    status TEXT NOT NULL,             -- INIT|UP|STOPPED
    cloud TEXT, region TEXT, zone TEXT, instance_type TEXT,
    accelerators TEXT,                -- JSON {NAME: COUNT}
    num_nodes INTEGER, use_spot INTEGER, hourly_cost REAL,
    launched_at REAL, status_updated_at REAL,
    autostop_minutes INTEGER, autostop_down INTEGER,
    handle TEXT,                      -- JSON
    resources TEXT,                   -- JSON
    last_use TEXT, request_id TEXT, status_reason TEXT
);

CREATE TABLE cluster_history (
    id INTEGER PRIMARY KEY,
    name TEXT, cloud TEXT, region TEXT, zone TEXT, instance_type TEXT,
    accelerators TEXT, num_nodes INTEGER, use_spot INTEGER, hourly_cost REAL,
    launched_at REAL, ended_at REAL, duration_s REAL, cost REAL
);
CREATE INDEX cluster_history_name ON cluster_history(name);

CREATE TABLE cluster_jobs (
    cluster TEXT NOT NULL, job_id INTEGER NOT NULL,
    name TEXT, status TEXT, submitted_at REAL, started_at REAL, ended_at REAL,
    exit_code INTEGER, resources TEXT, username TEXT, log_path TEXT,
    PRIMARY KEY (cluster, job_id)
);

CREATE TABLE managed_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT, status TEXT, schedule_state TEXT, priority INTEGER,
    submitted_at REAL, started_at REAL, ended_at REAL,
    recoveries INTEGER DEFAULT 0, restarts INTEGER DEFAULT 0, failure_reason TEXT,
    dag TEXT, strategy TEXT, current_task INTEGER DEFAULT 0,
    cluster TEXT, cluster_job_id INTEGER, last_region TEXT, updated_at REAL
);
CREATE INDEX managed_jobs_status ON managed_jobs(status);

CREATE TABLE managed_job_attempts (
    job_id INTEGER NOT NULL, task_index INTEGER NOT NULL, attempt INTEGER NOT NULL,
    cluster TEXT, cluster_job_id INTEGER, cloud TEXT, region TEXT, zone TEXT,
    status TEXT, started_at REAL, ended_at REAL, exit_code INTEGER, reason TEXT,
    PRIMARY KEY (job_id, task_index, attempt)
);

CREATE TABLE services (
    name TEXT PRIMARY KEY, status TEXT, spec TEXT, created_at REAL,
    endpoint TEXT, lb_port INTEGER, version INTEGER
);

CREATE TABLE replicas (
    service TEXT NOT NULL, replica_id INTEGER NOT NULL,
    status TEXT, cluster TEXT, url TEXT, version INTEGER,
    created_at REAL, updated_at REAL,
    PRIMARY KEY (service, replica_id)
);

CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT);
"""

async def _add_columns(db: Any, table: str, columns: dict[str, str]) -> None:
    """ALTER TABLE ADD COLUMN for each column not there yet (a component may have added it
    itself on an older database, e.g. the managed-jobs store)."""
    cur = await db.execute(f"PRAGMA table_info({table})")
    have = {row[1] for row in await cur.fetchall()}
    for name, decl in columns.items():
        if name not in have:
            await db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")


async def _v2(db: Any) -> None:
    """Usage accounting (a STOPPED cluster costs nothing) and the managed-jobs columns."""
    await _add_columns(db, "clusters", {"up_since": "REAL", "billed_s": "REAL NOT NULL DEFAULT 0"})
    await _add_columns(db, "managed_jobs", {
        "retry_until_up": "INTEGER NOT NULL DEFAULT 0", "exit_code": "INTEGER",
        "last_cloud": "TEXT", "last_zone": "TEXT",
    })


async def _v3(db: Any) -> None:
    """The provisioning lifecycle: a cluster row's tag (with cloud/region/zone it is the
    partial handle written before the first create call), and the cached cloud checks."""
    await _add_columns(db, "clusters", {"tag": "TEXT"})
    await db.execute(
        "CREATE TABLE IF NOT EXISTS cloud_checks (cloud TEXT PRIMARY KEY,"
        " ok INTEGER NOT NULL, reason TEXT, checked_at REAL NOT NULL)"
    )


async def _v4(db: Any) -> None:
    """Serving (skyd.serve): a service's reason and update time; a replica's port, job,
    location, reason and probe bookkeeping."""
    await _add_columns(db, "services", {"status_reason": "TEXT", "updated_at": "REAL"})
    await _add_columns(db, "replicas", {
        "port": "INTEGER", "job_id": "INTEGER", "status_reason": "TEXT", "cloud": "TEXT",
        "region": "TEXT", "zone": "TEXT", "use_spot": "INTEGER", "started_at": "REAL",
        "ready_at": "REAL", "fail_since": "REAL", "final_status": "TEXT",
    })


async def _v5(db: Any) -> None:
    """Bucket storage (skyd.storage): the buckets skyd created, the only ones it deletes."""
    await db.execute(
        "CREATE TABLE IF NOT EXISTS storage_buckets (name TEXT PRIMARY KEY, store TEXT NOT NULL,"
        " persistent INTEGER NOT NULL, cluster TEXT, source TEXT, status TEXT NOT NULL,"
        " created_at REAL NOT NULL)"
    )


# Worker pools (skyd.jobs.pools): migration v6; skyd.jobs.state creates them too.
POOL_SCHEMA = """
CREATE TABLE IF NOT EXISTS job_pools (
    name TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    workers INTEGER NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL
);
CREATE TABLE IF NOT EXISTS job_pool_workers (
    pool TEXT NOT NULL,
    idx INTEGER NOT NULL,
    cluster TEXT NOT NULL,
    status TEXT NOT NULL,
    job_id INTEGER,
    setup_job_id INTEGER,
    last_job_id INTEGER,
    reason TEXT,
    PRIMARY KEY (pool, idx)
);
"""


async def _v6(db: Any) -> None:
    """Managed-job worker pools (skyd.jobs.pools): a pool and its worker clusters."""
    for stmt in POOL_SCHEMA.split(";"):
        if stmt.strip():
            await db.execute(stmt)


async def _v7(db: Any) -> None:
    """Several users (skyd.daemon.owners): who made each request, cluster, managed job,
    service, pool and bucket. Rows from before belong to the daemon's own user."""
    from skyd.daemon.owners import daemon_user

    owner = daemon_user()
    for table in OWNED_TABLES:
        await _add_columns(db, table, {"user": "TEXT"})
        await db.execute(f"UPDATE {table} SET user = ? WHERE user IS NULL", (owner,))


OWNED_TABLES = ("requests", "clusters", "managed_jobs", "services", "job_pools",
                "storage_buckets")

MIGRATIONS: list[Migration] = [_V1, _v2, _v3, _v4, _v5, _v6, _v7]

# Columns holding JSON text, decoded by Store.fetch*(..., json_cols=...) helpers and the
# built-in reads.
JSON_COLUMNS: dict[str, tuple[str, ...]] = {
    "requests": ("payload", "result", "error", "stages"),
    "clusters": ("accelerators", "handle", "resources"),
}
