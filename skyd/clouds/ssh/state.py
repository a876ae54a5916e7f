"""Host allocations and the probed-host cache, under ``$SKYD_HOME/ssh/``.

- ``allocations.db``: a small SQLite file of its own (not the daemon's store, so the ssh infra
  and ``skyd ssh check`` work without the daemon). Allocation runs in one ``BEGIN IMMEDIATE``
  transaction: SQLite's file lock makes "pick free hosts + record them" atomic across
  processes, so two clusters never share a host.
- ``hosts.json``: what the last ``ssh check`` / provisioning probe found on each host (cpus,
  memory, GPUs, OS, python), read by ``dynamic_offerings`` without touching the network.

Blocking sqlite/file calls: the async wrappers run them in a thread.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from skyd import paths
from skyd.errors import ResourcesUnavailableError
from skyd.sqlite_tx import immediate


def state_dir() -> Path:
    return paths.home() / "ssh"


def _db() -> sqlite3.Connection:
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(d / "allocations.db", timeout=30, isolation_level=None)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS allocations ("
        " host_key TEXT PRIMARY KEY, pool TEXT NOT NULL, cluster TEXT NOT NULL,"
        " rank INTEGER NOT NULL, allocated_at REAL NOT NULL)"
    )
    return conn


def allocate_sync(pool: str, cluster: str, candidates: Sequence[str], n: int) -> list[str]:
    """Give ``cluster`` ``n`` hosts (keys) from ``candidates`` in order, reusing the ones it
    already holds (idempotent). Raises ResourcesUnavailableError when too few are free."""
    conn = _db()
    try:
        with immediate(conn):
            rows = conn.execute("SELECT host_key, cluster, rank FROM allocations").fetchall()
            owner = {r[0]: r[1] for r in rows}
            mine = sorted((r[2], r[0]) for r in rows if r[1] == cluster)
            chosen = [k for _, k in mine][:n]
            for key in candidates:
                if len(chosen) >= n:
                    break
                if key not in owner and key not in chosen:
                    chosen.append(key)
            if len(chosen) < n:
                busy = sorted({owner[k] for k in candidates if k in owner and owner[k] != cluster})
                raise ResourcesUnavailableError(
                    f"SSH pool {pool!r} has {len(chosen)} free host(s), {n} needed"
                    + (f" (in use by cluster(s) {', '.join(busy)})" if busy else ""),
                    field="num_nodes",
                    hint="add hosts to the pool, lower num_nodes, or `skyd down` a cluster using it",
                )
            now = time.time()
            for rank, key in enumerate(chosen):
                conn.execute(
                    "INSERT OR REPLACE INTO allocations VALUES (?, ?, ?, ?, ?)",
                    (key, pool, cluster, rank, now),
                )
        return chosen
    finally:
        conn.close()


def release_sync(cluster: str) -> list[str]:
    conn = _db()
    try:
        with immediate(conn):
            keys = [r[0] for r in conn.execute("SELECT host_key FROM allocations WHERE cluster=?",
                                               (cluster,))]
            conn.execute("DELETE FROM allocations WHERE cluster=?", (cluster,))
        return keys
    finally:
        conn.close()


def allocations_sync() -> dict[str, str]:
    """host_key -> cluster."""
    if not (state_dir() / "allocations.db").exists():
        return {}
    conn = _db()
    try:
        return {r[0]: r[1] for r in conn.execute("SELECT host_key, cluster FROM allocations")}
    finally:
        conn.close()


async def allocate(pool: str, cluster: str, candidates: Sequence[str], n: int) -> list[str]:
    return await anyio.to_thread.run_sync(allocate_sync, pool, cluster, list(candidates), n)


async def release(cluster: str) -> list[str]:
    return await anyio.to_thread.run_sync(release_sync, cluster)


async def allocations() -> dict[str, str]:
    return await anyio.to_thread.run_sync(allocations_sync)


# -- probed host facts --------------------------------------------------------------------


def _hosts_file() -> Path:
    return state_dir() / "hosts.json"


def load_host_facts() -> dict[str, dict[str, Any]]:
    try:
        return dict(json.loads(_hosts_file().read_text()))
    except (OSError, ValueError):
        return {}


_FACTS_LOCK = threading.Lock()


def save_host_facts_sync(updates: dict[str, dict[str, Any]]) -> None:
    """Merge ``updates`` into hosts.json: read-modify-write under a thread lock and an flock
    (concurrent probes in the daemon, ``skyd ssh check`` in another process), atomic rename."""
    p = _hosts_file()
    p.parent.mkdir(parents=True, exist_ok=True)
    with _FACTS_LOCK, open(p.with_suffix(".lock"), "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        facts = load_host_facts()
        facts.update(updates)
        tmp = p.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")
        tmp.write_text(json.dumps(facts, indent=1, sort_keys=True))
        tmp.replace(p)


async def save_host_facts(updates: dict[str, dict[str, Any]]) -> None:
    await anyio.to_thread.run_sync(save_host_facts_sync, updates)
