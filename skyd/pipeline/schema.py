"""The clusters' tables (``clusters``, ``cluster_history``, ``cluster_jobs``) and the cached
cloud checks (``cloud_checks``): the ``pipeline`` component of the state database
(skyd.daemon.schema). Importing this module registers them."""

from __future__ import annotations

from typing import Any

from skyd.daemon import owners, schema

_TABLES = """
CREATE TABLE IF NOT EXISTS clusters (
    name TEXT PRIMARY KEY,
    status TEXT NOT NULL,             -- INIT|UP|STOPPED
    cloud TEXT, region TEXT, zone TEXT, instance_type TEXT,
    accelerators TEXT,                -- JSON {NAME: COUNT}
    num_nodes INTEGER, use_spot INTEGER, hourly_cost REAL,
    launched_at REAL, status_updated_at REAL,
    autostop_minutes INTEGER, autostop_down INTEGER,
    handle TEXT,                      -- JSON
    resources TEXT,                   -- JSON
    last_use TEXT, request_id TEXT, status_reason TEXT,
    up_since REAL,                    -- usage: a STOPPED cluster costs nothing
    billed_s REAL NOT NULL DEFAULT 0,
    tag TEXT                          -- with cloud/region/zone: the partial handle
);

CREATE TABLE IF NOT EXISTS cluster_history (
    id INTEGER PRIMARY KEY,
    name TEXT, cloud TEXT, region TEXT, zone TEXT, instance_type TEXT,
    accelerators TEXT, num_nodes INTEGER, use_spot INTEGER, hourly_cost REAL,
    launched_at REAL, ended_at REAL, duration_s REAL, cost REAL
);
CREATE INDEX IF NOT EXISTS cluster_history_name ON cluster_history(name);

CREATE TABLE IF NOT EXISTS cluster_jobs (
    cluster TEXT NOT NULL, job_id INTEGER NOT NULL,
    name TEXT, status TEXT, submitted_at REAL, started_at REAL, ended_at REAL,
    exit_code INTEGER, resources TEXT, username TEXT, log_path TEXT,
    PRIMARY KEY (cluster, job_id)
);

CREATE TABLE IF NOT EXISTS cloud_checks (
    cloud TEXT PRIMARY KEY, ok INTEGER NOT NULL, reason TEXT, checked_at REAL NOT NULL
);
"""


async def _columns_of_older_tables(db: Any) -> None:
    """A clusters table made before usage accounting and the provisioning tag."""
    await schema.add_columns(db, "clusters", {
        "up_since": "REAL", "billed_s": "REAL NOT NULL DEFAULT 0", "tag": "TEXT",
    })


COMPONENT = schema.register(
    "pipeline", [_TABLES, _columns_of_older_tables, schema.owned_by_users("clusters"),
                 schema.owned_by_users("cluster_history")],
    json_columns={"clusters": ("accelerators", "handle", "resources")},
)


# Who owns a cluster (skyd.daemon.owners): the verbs, routes and watch topics that name one.
owners.own(
    owners.Kind("cluster", "clusters", "name", "cluster", all_key="clusters"),
    mutations={"launch": (("cluster_name",), False), "exec": (("cluster_name",), False),
               "cancel": (("cluster_name",), False), "stop": (("clusters", "cluster_name"), True),
               "start": (("clusters", "cluster_name"), True), "down": (("clusters", "cluster_name"), True),
               "autostop": (("clusters", "cluster_name"), True)},
    listings={"/v1/status": "name", "/v1/status/refresh": "name"},
    named={"/v1/clusters/{cluster}/queue": "cluster", "/v1/clusters/{cluster}/logs": "cluster",
           "/v1/clusters/{cluster}/jobs/{job_id}/logs": "cluster",
           "/v1/clusters/{cluster}/addresses": "cluster"},
    topics={"clusters": "name", "jobs": "cluster"},
)
