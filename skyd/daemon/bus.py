"""In-process pub/sub of state-change events (the TUI watches them via GET /v1/watch).

``publish(topic, data)`` is synchronous and never blocks: each subscriber has a bounded
buffer; a subscriber that falls behind loses its oldest events and gets one
``{"topic": "_overflow"}`` marker so it knows to re-read state.
Topics in use: ``requests`` (built in), ``clusters``, ``jobs``, ``services`` (pipeline).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any

import anyio


class _Sub:
    __slots__ = ("topics", "queue", "event", "overflowed", "maxlen")

    def __init__(self, topics: frozenset[str] | None, maxlen: int) -> None:
        self.topics = topics
        self.queue: deque[dict[str, Any]] = deque()
        self.event = anyio.Event()
        self.overflowed = False
        self.maxlen = maxlen


class EventBus:
    def __init__(self, buffer: int = 1000) -> None:
        self._subs: set[_Sub] = set()
        self._buffer = buffer

    @property
    def subscriber_count(self) -> int:
        return len(self._subs)

    def publish(self, topic: str, data: Any) -> None:
        if not self._subs:
            return
        ev = {"topic": topic, "ts": time.time(), "data": data}
        for s in self._subs:
            if s.topics is not None and topic not in s.topics:
                continue
            if len(s.queue) >= s.maxlen:
                s.queue.popleft()
                s.overflowed = True
            s.queue.append(ev)
            s.event.set()

    async def subscribe(self, topics: Iterable[str] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Async-iterate events of ``topics`` (all topics when None) until cancelled."""
        sub = _Sub(frozenset(topics) if topics is not None else None, self._buffer)
        self._subs.add(sub)
        try:
            while True:
                await sub.event.wait()
                sub.event = anyio.Event()
                if sub.overflowed:
                    sub.overflowed = False
                    yield {"topic": "_overflow", "ts": time.time(), "data": None}
                while sub.queue:
                    yield sub.queue.popleft()
        finally:
            self._subs.discard(sub)
