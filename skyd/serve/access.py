"""The load balancer's access log: one line per request, bounded in memory and on disk.

The listener only appends a tuple to a bounded deque (no formatting, no I/O on the hot
path); the controller drains it every second into ``<service>.access.log`` in a worker
thread. When the file passes ``$SKYD_SERVE_ACCESS_LOG_MAX`` bytes (default 8 MiB) it moves
to ``.1`` (the previous ``.1`` goes), so a service keeps at most twice that. Should the
disk stall, the deque keeps the newest ``BUFFER`` entries and counts what it dropped.

A line: ``2026-12-01T20:20:01.123Z replica=1 status=200 bytes=532 latency_ms=1.42 GET /v1/x``
(``replica=-`` when none was picked: a 503; ``status=-`` when the client left before the
answer began; the path without its query string, which may carry secrets).
"""

from __future__ import annotations

import os
import time
from collections import deque
from pathlib import Path

BUFFER = 50_000
DEFAULT_MAX_BYTES = 8 << 20

# (wall time, replica id or None, status (0: none), response bytes, latency s, method, url)
Entry = tuple[float, int | None, int, int, float, bytes, bytes]


class AccessLog:
    __slots__ = ("entries", "dropped")

    def __init__(self) -> None:
        self.entries: deque[Entry] = deque(maxlen=BUFFER)
        self.dropped = 0

    def record(self, t0: float, rid: int | None, status: int, nbytes: int, method: bytes,
               url: bytes) -> None:
        """t0: time.monotonic() when the request's head was in."""
        if len(self.entries) == BUFFER:
            self.dropped += 1
        now = time.monotonic()
        self.entries.append((time.time(), rid, status, nbytes, now - t0, method, url))

    def drain(self) -> str:
        out = []
        while self.entries:
            at, rid, status, nbytes, lat, method, url = self.entries.popleft()
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}Z"
            path = url.split(b"?", 1)[0].decode("latin-1")
            out.append(f"{stamp} replica={'-' if rid is None else rid} "
                       f"status={status or '-'} bytes={nbytes} latency_ms={lat * 1000:.2f} "
                       f"{method.decode('latin-1')} {path}\n")
        if self.dropped:
            out.append(f"(access log: {self.dropped} entries dropped, the writer fell behind)\n")
            self.dropped = 0
        return "".join(out)


def max_bytes() -> int:
    return int(os.environ.get("SKYD_SERVE_ACCESS_LOG_MAX") or DEFAULT_MAX_BYTES)


def append_rotating(path: Path, text: str, limit: int) -> None:
    """Append; move the file to .1 first when it would pass `limit`. (A worker thread.)"""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        size = 0
    if size and size + len(text) > limit:
        os.replace(path, path.with_name(path.name + ".1"))
    with open(path, "a") as f:
        f.write(text)
