"""The state database's schema: the core's migrations, and the ones features register.

The core (this module) owns the tables every part of the daemon uses: ``requests`` and
``kv``. A feature (jobs, serve, pipeline, storage) owns its own tables: it registers them
with :func:`register` as a *component* — a name and an append-only list of steps — from
the module that reads them, so the core never imports a feature (DESIGN §2).

Versions:

* ``CORE_MIGRATIONS[i]`` takes the file from ``PRAGMA user_version = i`` to ``i + 1``.
  Numbers 2-6 are kept (as no-ops) so that ``user_version`` means what it meant when the
  feature tables were part of the core's list; every database made since keeps working.
* A component's version is its row in ``schema_components``; step ``i`` takes it from
  ``i`` to ``i + 1``. The first steps of every component are idempotent (``CREATE ...
  IF NOT EXISTS``, :func:`add_columns`), because a database made before components kept
  their own versions already holds some of their tables.

A step is an SQL script (str) or an async callable taking the aiosqlite connection (for
data migrations). Never edit a released step: append a new one. Each step runs in its own
transaction together with its version bump (skyd.daemon.store.Store.migrate).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Migration = str | Callable[[Any], Awaitable[None]]

__all__ = ["CORE_MIGRATIONS", "Component", "Migration", "add_columns", "components",
           "owned_by_users", "register", "split_sql"]

_V1 = """
CREATE TABLE IF NOT EXISTS requests (
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
CREATE INDEX IF NOT EXISTS requests_status ON requests(status);
CREATE INDEX IF NOT EXISTS requests_created ON requests(created_at);

CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT);
"""


async def _moved(db: Any) -> None:
    """A step whose tables now belong to a component (kept so the numbering holds)."""


_V7 = """
CREATE TABLE IF NOT EXISTS schema_components (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL
);
"""

def owned_by_users(*tables: str) -> Migration:
    """A step giving each table a ``user`` column (several users, skyd.daemon.owners: who
    made the row); rows from before belong to the daemon's own user."""

    async def step(db: Any) -> None:
        from skyd.daemon.owners import daemon_user

        owner = daemon_user()
        for table in tables:
            await add_columns(db, table, {"user": "TEXT"})
            await db.execute(f"UPDATE {table} SET user = ? WHERE user IS NULL", (owner,))

    return step


#: v2 (clusters usage, managed-jobs columns), v3 (provisioning tag, cloud checks), v4
#: (serving), v5 (buckets) and v6 (pools) live in the pipeline, jobs, serve and storage
#: components now; v8: who made each request (the components own their tables' column).
CORE_MIGRATIONS: list[Migration] = [_V1, _moved, _moved, _moved, _moved, _moved, _V7,
                                    owned_by_users("requests")]

#: Columns holding JSON text in the core's tables (decoded by Store.fetch*(json_cols=...)).
JSON_COLUMNS: dict[str, tuple[str, ...]] = {
    "requests": ("payload", "result", "error", "stages"),
}


@dataclass(frozen=True)
class Component:
    """A feature's tables: its name (the key in ``schema_components``) and its steps."""

    name: str
    steps: tuple[Migration, ...]
    json_columns: dict[str, tuple[str, ...]] = field(default_factory=dict)


_COMPONENTS: dict[str, Component] = {}


def register(name: str, steps: Sequence[Migration], *,
             json_columns: dict[str, tuple[str, ...]] | None = None) -> Component:
    """Register (or re-register, on a module reload) a feature's schema. Every store opened
    afterwards creates and upgrades its tables. Call it at import time of the module that
    uses the tables, so that using them implies registering them."""
    if not name or not steps:
        raise ValueError("a schema component needs a name and at least one step")
    comp = Component(name, tuple(steps), dict(json_columns or {}))
    _COMPONENTS[name] = comp
    return comp


def components() -> list[Component]:
    """The registered components, by name (a stable order for their migrations)."""
    return [_COMPONENTS[n] for n in sorted(_COMPONENTS)]


async def add_columns(db: Any, table: str, columns: dict[str, str]) -> None:
    """ALTER TABLE ADD COLUMN for each column not there yet (idempotent)."""
    cur = await db.execute(f"PRAGMA table_info({table})")
    have = {row[1] for row in await cur.fetchall()}
    for name, decl in columns.items():
        if name not in have:
            await db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")


def split_sql(script: str) -> list[str]:
    """Split a migration script into statements (no semicolons inside literals please)."""
    out: list[str] = []
    buf: list[str] = []
    for line in script.splitlines():
        stripped = line.split("--", 1)[0]
        buf.append(stripped)
        if stripped.rstrip().endswith(";"):
            stmt = "\n".join(buf).strip()
            if sqlite3.complete_statement(stmt):
                out.append(stmt)
                buf = []
    tail = "\n".join(buf).strip()
    if tail:
        out.append(tail)
    return out
