"""Per-cluster locks: launch/exec/stop/start/down on one cluster run one at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

_LOCKS: dict[str, anyio.Lock] = {}


@asynccontextmanager
async def cluster_lock(name: str) -> AsyncIterator[None]:
    lock = _LOCKS.setdefault(name, anyio.Lock())
    async with lock:
        yield


def busy() -> set[str]:
    """The clusters whose lock is held now (an operation on them is in flight)."""
    return {n for n, lock in _LOCKS.items() if lock.locked()}


def is_busy(name: str) -> bool:
    lock = _LOCKS.get(name)
    return lock is not None and lock.locked()
