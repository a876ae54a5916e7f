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
