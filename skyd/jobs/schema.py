"""The managed-jobs tables (``managed_jobs``, ``managed_job_attempts``) and the worker
pools' (``job_pools``, ``job_pool_workers``): the ``jobs`` component of the state database
(skyd.daemon.schema). Importing this module registers them."""

from __future__ import annotations

from typing import Any

from skyd.daemon import owners, schema
from skyd.jobs.status import TERMINAL

_TABLES = """
CREATE TABLE IF NOT EXISTS managed_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT, status TEXT, schedule_state TEXT, priority INTEGER,
    submitted_at REAL, started_at REAL, ended_at REAL,
    recoveries INTEGER DEFAULT 0, restarts INTEGER DEFAULT 0, failure_reason TEXT,
    dag TEXT, strategy TEXT, current_task INTEGER DEFAULT 0,
    cluster TEXT, cluster_job_id INTEGER, last_region TEXT, updated_at REAL,
    retry_until_up INTEGER NOT NULL DEFAULT 0, exit_code INTEGER,
    last_cloud TEXT, last_zone TEXT
);
CREATE INDEX IF NOT EXISTS managed_jobs_status ON managed_jobs(status);

CREATE TABLE IF NOT EXISTS managed_job_attempts (
    job_id INTEGER NOT NULL, task_index INTEGER NOT NULL, attempt INTEGER NOT NULL,
    cluster TEXT, cluster_job_id INTEGER, cloud TEXT, region TEXT, zone TEXT,
    status TEXT, started_at REAL, ended_at REAL, exit_code INTEGER, reason TEXT,
    PRIMARY KEY (job_id, task_index, attempt)
);

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


async def _columns_of_older_tables(db: Any) -> None:
    """A managed_jobs table made before these columns existed (by an older daemon)."""
    await schema.add_columns(db, "managed_jobs", {
        "retry_until_up": "INTEGER NOT NULL DEFAULT 0", "exit_code": "INTEGER",
        "last_cloud": "TEXT", "last_zone": "TEXT",
    })


COMPONENT = schema.register("jobs", [_TABLES, _columns_of_older_tables,
                                      schema.owned_by_users("managed_jobs", "job_pools")])


# Who owns a managed job or a worker pool (skyd.daemon.owners). `all` of a non-admin acts on
# their jobs that have not ended; a job may be named by its name.
_ENDED = ", ".join(f"'{s}'" for s in sorted(TERMINAL))
owners.own(
    owners.Kind("job", "managed_jobs", "id", "managed job", all_key="ids", by_name="name",
                int_keys=True, live=f"status NOT IN ({_ENDED})"),
    mutations={"jobs.cancel": (("ids",), True)},
    listings={"/v1/jobs": "id"},
    named={"/v1/jobs/{id}": "id", "/v1/jobs/{id}/logs": "id"},
    topics={"managed_jobs": "id"},
)
owners.own(
    owners.Kind("pool", "job_pools", "name", "worker pool", all_key="names"),
    mutations={"jobs.pool_apply": (("name",), False), "jobs.pool_down": (("names",), True),
               "jobs.launch": (("pool",), False)},  # submitting to another user's worker pool
    listings={"/v1/pools": "name"},
    named={"/v1/pools/{name}/logs": "name"},
)
