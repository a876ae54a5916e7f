"""Addresses of `local` nodes: each node has its own loopback address.

Linux routes all of 127.0.0.0/8 to the loopback interface, so a node's agent, and every job
rank on it, can bind the node's own address: two ranks of one cluster may each listen on
port 29500, as on two VMs. skyd owns a range of that block (default ``127.0.0.0/24``, i.e.
127.0.0.2-127.0.0.254, never 127.0.0.1; ``$SKYD_LOCAL_NET`` chooses another range inside
127.0.0.0/8, e.g. ``127.77.0.0/16`` for more nodes at once); an instance starts looking
for free addresses at an offset derived from its SKYD_HOME, so two isolated instances (tests
in parallel) rarely hand out the same address.

Allocations live in ``$SKYD_HOME/local-addresses.db``, a small SQLite file of the local infra
(as the ssh infra keeps ``ssh/allocations.db``): a cluster's nodes get their addresses in one
``BEGIN IMMEDIATE`` transaction before any agent starts, kept across stop/start and freed
at ``down`` (and when a failed attempt is forgotten). Blocking calls run in a thread.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import sqlite3
import time

import anyio

from skyd import paths, settings
from skyd.errors import InvalidSpecError, ResourcesUnavailableError
from skyd.sqlite_tx import immediate

DEFAULT_NET = settings.LOCAL_NET.default
LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")


def network() -> ipaddress.IPv4Network:
    text = settings.LOCAL_NET.get()
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError as e:
        raise InvalidSpecError(f"SKYD_LOCAL_NET {text!r} is not a network ({e})",
                               field="SKYD_LOCAL_NET", hint=f"e.g. {DEFAULT_NET}") from None
    if not isinstance(net, ipaddress.IPv4Network) or not net.subnet_of(LOOPBACK) or net.num_addresses < 4:
        raise InvalidSpecError(f"SKYD_LOCAL_NET {text!r} must be a range of at least 4 addresses"
                               " inside 127.0.0.0/8", field="SKYD_LOCAL_NET", hint=f"e.g. {DEFAULT_NET}")
    return net


def _usable(addr: ipaddress.IPv4Address) -> bool:
    last = int(addr) & 0xFF
    return last not in (0, 255) and str(addr) != "127.0.0.1"


def _db_path() -> str:
    return str(paths.home() / "local-addresses.db")


def _db() -> sqlite3.Connection:
    paths.home().mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(_db_path(), timeout=30, isolation_level=None)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS addresses (address TEXT PRIMARY KEY, cluster TEXT NOT NULL,"
        " rank INTEGER NOT NULL, allocated_at REAL NOT NULL)"
    )
    return conn


def allocate_sync(cluster: str, n: int) -> list[str]:
    """Addresses for ranks 0..n-1 of ``cluster`` (the ones it holds are kept: idempotent)."""
    net = network()
    size = net.num_addresses
    start = int.from_bytes(hashlib.sha256(str(paths.home().resolve()).encode()).digest()[:4], "big") % size
    conn = _db()
    try:
        with immediate(conn):
            rows = conn.execute("SELECT address, cluster, rank FROM addresses").fetchall()
            taken = {r[0] for r in rows}
            mine = {int(r[2]): r[0] for r in rows if r[1] == cluster}
            out: list[str] = []
            i = 0
            for rank in range(n):
                if rank in mine:
                    out.append(mine[rank])
                    continue
                while i < size:
                    cand = net.network_address + (start + i) % size
                    i += 1
                    if _usable(cand) and str(cand) not in taken:
                        break
                else:
                    raise ResourcesUnavailableError(
                        f"no free local node address left in {net} ({len(taken)} in use)",
                        field="num_nodes", scope="cloud",
                        hint="skyd down local clusters you no longer need, or set SKYD_LOCAL_NET to a larger range")
                taken.add(str(cand))
                out.append(str(cand))
            now = time.time()
            conn.execute("DELETE FROM addresses WHERE cluster = ? AND rank >= ?", (cluster, n))
            for rank, addr in enumerate(out):
                conn.execute("INSERT OR REPLACE INTO addresses VALUES (?, ?, ?, ?)", (addr, cluster, rank, now))
        return out
    finally:
        conn.close()


def release_sync(cluster: str) -> list[str]:
    if not os.path.exists(_db_path()):
        return []
    conn = _db()
    try:
        with immediate(conn):
            out = [r[0] for r in conn.execute("SELECT address FROM addresses WHERE cluster = ?", (cluster,))]
            conn.execute("DELETE FROM addresses WHERE cluster = ?", (cluster,))
        return out
    finally:
        conn.close()


def allocations_sync() -> dict[str, tuple[str, int]]:
    """address -> (cluster, rank)."""
    if not os.path.exists(_db_path()):
        return {}
    conn = _db()
    try:
        return {r[0]: (r[1], int(r[2])) for r in conn.execute("SELECT address, cluster, rank FROM addresses")}
    finally:
        conn.close()


async def allocate(cluster: str, n: int) -> list[str]:
    return await anyio.to_thread.run_sync(allocate_sync, cluster, n)


async def release(cluster: str) -> list[str]:
    return await anyio.to_thread.run_sync(release_sync, cluster)
