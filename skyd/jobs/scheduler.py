"""Bounds how many managed-job launches run at once.

A launch (a whole provisioning round of a strategy, initial or recovery) holds one slot.
Waiters are served by priority (higher first), then submit time, then job id. The persisted
schedule state (WAITING → LAUNCHING → ALIVE → DONE) is written by the controller around
`slot()`; this object is the in-memory part only.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio


def default_max_launches() -> int:
    return 4 * (os.cpu_count() or 1)


@dataclass(order=True)
class _Waiter:
    key: tuple[int, float, int]
    event: anyio.Event = field(compare=False, default_factory=anyio.Event)
    granted: bool = field(compare=False, default=False)
    gone: bool = field(compare=False, default=False)


class LaunchScheduler:
    def __init__(self, max_concurrent: int | None = None) -> None:
        self.max_concurrent = max(1, max_concurrent or default_max_launches())
        self.in_use = 0
        self.peak = 0  # highest concurrency seen (tests and benchmarks read it)
        self._heap: list[_Waiter] = []

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._heap if not w.gone)

    def _grant_next(self) -> None:
        while self._heap and self.in_use < self.max_concurrent:
            w = heapq.heappop(self._heap)
            if w.gone:
                continue
            w.granted = True
            self.in_use += 1
            self.peak = max(self.peak, self.in_use)
            w.event.set()

    def _release(self) -> None:
        self.in_use -= 1
        self._grant_next()

    @asynccontextmanager
    async def slot(self, job_id: int, priority: int, submitted_at: float) -> AsyncIterator[None]:
        w = _Waiter((-priority, submitted_at, job_id))
        heapq.heappush(self._heap, w)
        self._grant_next()
        try:
            await w.event.wait()
        except BaseException:
            w.gone = True
            if w.granted:  # granted and cancelled in the same breath: hand it on
                self._release()
            raise
        try:
            yield
        finally:
            self._release()
