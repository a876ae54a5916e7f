"""The load balancer's access log: one line per request, bounded in memory and on disk.

The listener only appends a tuple to a bounded deque (no formatting, no I/O on the hot
path); the controller takes it every second and formats and appends it to
``<service>.access.log`` in a worker thread. When the file passes ``$SKYD_SERVE_ACCESS_LOG_MAX`` bytes (default 8 MiB) it moves
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

from skyd import settings

BUFFER = 50_000

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

    def take(self) -> tuple[deque[Entry], int]:
        """What was recorded so far (O(1) on the event loop; `format` it in a thread)."""
        out, dropped = self.entries, self.dropped
        self.entries, self.dropped = deque(maxlen=BUFFER), 0
        return out, dropped

    def drain(self) -> str:
        return format_entries(*self.take())


def format_entries(entries: deque[Entry], dropped: int) -> str:
    out = []
    last_sec, stamp = -1, ""
    for at, rid, status, nbytes, lat, method, url in entries:
        sec = int(at)
        if sec != last_sec:
            last_sec, stamp = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        path = url.split(b"?", 1)[0].decode("latin-1")
        out.append(f"{stamp}.{int(at * 1000) % 1000:03d}Z replica={'-' if rid is None else rid} "
                   f"status={status or '-'} bytes={nbytes} latency_ms={lat * 1000:.2f} "
                   f"{method.decode('latin-1')} {path}\n")
    if dropped:
        out.append(f"(access log: {dropped} entries dropped, the writer fell behind)\n")
    return "".join(out)


def write_entries(path: Path, entries: deque[Entry], dropped: int, limit: int) -> None:
    """Format and append (a worker thread)."""
    if entries or dropped:
        append_rotating(path, format_entries(entries, dropped), limit)


def max_bytes() -> int:
    return settings.SERVE_ACCESS_LOG_MAX.get()


def append_rotating(path: Path, text: str, limit: int) -> None:
    """Append; move the file to .1 first when it would pass `limit` (a batch larger than
    `limit` keeps its newest whole lines). A worker thread."""
    if len(text) > limit:
        text = text[text.find("\n", len(text) - limit) + 1:]
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        size = 0
    if size and size + len(text) > limit:
        os.replace(path, path.with_name(path.name + ".1"))
    with open(path, "a") as f:
        f.write(text)
