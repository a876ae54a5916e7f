"""SQLite write transactions, the one way skyd opens them: ``BEGIN IMMEDIATE`` retried while
another connection holds the write lock, then COMMIT, or ROLLBACK on any error.

SQLite's busy handler gives up after ``busy_timeout``, and not at all in some WAL recovery
cases right after a crash ("database is locked" at once): a write that must happen waits
with a backoff instead, up to ``BEGIN_RETRY_S``. The daemon's store (skyd.daemon.store) uses
these on its connections; the small per-infra allocation files (local addresses, SSH pool
hosts), which work without a daemon, use :func:`immediate`. Stdlib only.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["BEGIN_RETRY_S", "backoff", "begin_immediate", "immediate", "is_locked"]

#: Another process holding SQLite's write lock this long is a real fault.
BEGIN_RETRY_S = 60.0


def is_locked(e: BaseException) -> bool:
    """SQLite's "database is locked/busy" (another connection holds the write lock)."""
    return isinstance(e, sqlite3.OperationalError) and ("locked" in str(e) or "busy" in str(e))


def backoff(budget: float, now: Callable[[], float]) -> Iterator[float]:
    """The delays between BEGIN IMMEDIATE attempts, until ``budget`` seconds are spent."""
    deadline = now() + budget
    delay = 0.01
    while now() < deadline:
        yield delay
        delay = min(delay * 2, 0.25)


def begin_immediate(conn: sqlite3.Connection, budget: float = BEGIN_RETRY_S) -> None:
    """BEGIN IMMEDIATE on a plain sqlite3 connection (in autocommit mode), retried while
    another connection holds the write lock."""
    delays = backoff(budget, time.monotonic)
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as e:
            delay = next(delays, None) if is_locked(e) else None
            if delay is None:
                raise
        time.sleep(delay)


@contextmanager
def immediate(conn: sqlite3.Connection, budget: float = BEGIN_RETRY_S) -> Iterator[None]:
    """``with immediate(conn): ...`` — one write transaction: committed on normal exit,
    rolled back on any exception (which propagates)."""
    begin_immediate(conn, budget)
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
