"""The serving tables (``services``, ``replicas``, and ``serve_preemptions``, the spot
placer's memory): the ``serve`` component of the state
database (skyd.daemon.schema). Importing this module registers them."""

from __future__ import annotations

from typing import Any

from skyd.daemon import owners, schema

_TABLES = """
CREATE TABLE IF NOT EXISTS services (
    name TEXT PRIMARY KEY, status TEXT, spec TEXT, created_at REAL,
    endpoint TEXT, lb_port INTEGER, version INTEGER,
    status_reason TEXT, updated_at REAL
);

CREATE TABLE IF NOT EXISTS replicas (
    service TEXT NOT NULL, replica_id INTEGER NOT NULL,
    status TEXT, cluster TEXT, url TEXT, version INTEGER,
    created_at REAL, updated_at REAL,
    port INTEGER, job_id INTEGER, status_reason TEXT, cloud TEXT, region TEXT, zone TEXT,
    use_spot INTEGER, started_at REAL, ready_at REAL, fail_since REAL, final_status TEXT,
    PRIMARY KEY (service, replica_id)
);
"""


async def _columns_of_older_tables(db: Any) -> None:
    """Tables made before a service's reason and a replica's port/job/probe columns."""
    await schema.add_columns(db, "services", {"status_reason": "TEXT", "updated_at": "REAL"})
    await schema.add_columns(db, "replicas", {
        "port": "INTEGER", "job_id": "INTEGER", "status_reason": "TEXT", "cloud": "TEXT",
        "region": "TEXT", "zone": "TEXT", "use_spot": "INTEGER", "started_at": "REAL",
        "ready_at": "REAL", "fail_since": "REAL", "final_status": "TEXT",
    })


_PREEMPTIONS = """
CREATE TABLE IF NOT EXISTS serve_preemptions (
    service TEXT NOT NULL, cloud TEXT NOT NULL, region TEXT, zone TEXT, at REAL NOT NULL
);
"""

COMPONENT = schema.register("serve", [_TABLES, _columns_of_older_tables, _PREEMPTIONS,
                                       schema.owned_by_users("services")])


# Who owns a service (skyd.daemon.owners).
owners.own(
    owners.Kind("service", "services", "name", "service", all_key="names"),
    mutations={"serve.update": (("name",), False), "serve.down": (("names",), True)},
    listings={"/v1/services": "name"},
    named={"/v1/services/{name}": "name", "/v1/services/{name}/logs": "name"},
    topics={"serve": "service"},
)
