"""The buckets skyd created (``storage_buckets``): the ``storage`` component of the state
database (skyd.daemon.schema). Importing this module registers it."""

from __future__ import annotations

from skyd.daemon import owners, schema

_TABLES = """
CREATE TABLE IF NOT EXISTS storage_buckets (
    name TEXT PRIMARY KEY, store TEXT NOT NULL, persistent INTEGER NOT NULL, cluster TEXT,
    source TEXT, status TEXT NOT NULL, created_at REAL NOT NULL
);
"""

COMPONENT = schema.register("storage", [_TABLES, schema.owned_by_users("storage_buckets")])


# Who owns a bucket skyd made (skyd.daemon.owners).
owners.own(
    owners.Kind("bucket", "storage_buckets", "name", "bucket", all_key="names"),
    mutations={"storage.delete": (("names",), True)},
    listings={"/v1/storage": "name"},
)
