"""Which tables an event from ``GET /v1/watch`` invalidates, and a coalescing reloader.

The TUI never polls: it re-reads a table when the daemon's bus says something it shows
changed. Bursts coalesce: while a table's reload runs, further events for it only mark it
dirty, and one more reload follows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

PANES = ("clusters", "jobs", "managed", "services", "requests")

# topic -> panes to re-read. ``requests`` also refreshes clusters and jobs: a finished
# launch/stop/down changed them even if the pipeline published nothing itself.
TOPIC_PANES: dict[str, tuple[str, ...]] = {
    "requests": ("requests", "clusters", "jobs"),
    "clusters": ("clusters", "jobs"),
    "jobs": ("jobs", "managed"),
    "managed_jobs": ("managed",),
    "services": ("services",),
    "replicas": ("services",),
    "serve": ("services",),
}


def panes_for(topic: str | None) -> tuple[str, ...]:
    """Panes an event of ``topic`` invalidates; every pane on hello/overflow/unknown."""
    if topic in TOPIC_PANES:
        return TOPIC_PANES[topic]  # type: ignore[index]
    return PANES


class Coalescer:
    """``poke(name)`` runs ``reload(name)`` soon; at most one run per name at a time."""

    def __init__(self, reload: Callable[[str], Awaitable[None]],
                 spawn: Callable[[Callable[[], Awaitable[None]]], object]) -> None:
        self._reload = reload
        self._spawn = spawn
        self._running: set[str] = set()
        self._dirty: set[str] = set()
        self.runs = 0

    def poke(self, name: str) -> None:
        if name in self._running:
            self._dirty.add(name)
            return
        self._running.add(name)

        async def run() -> None:
            try:
                while True:
                    self._dirty.discard(name)
                    self.runs += 1
                    await self._reload(name)
                    if name not in self._dirty:
                        return
                    await anyio.sleep(0.05)  # let a burst settle
            finally:
                self._running.discard(name)

        self._spawn(run)

    @property
    def busy(self) -> bool:
        return bool(self._running)
