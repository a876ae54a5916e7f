"""Log streaming: tail N lines, follow until the job is terminal and the file is drained,
and merging of several ranks' streams with per-line prefixes. Python 3.8 compatible."""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

CHUNK = 256 * 1024


def tail_offset(path: Path, lines: int) -> int:
    """Byte offset where the last `lines` lines of the file start (0 = whole file)."""
    if lines <= 0:
        return 0
    with open(str(path), "rb") as f:
        f.seek(0, os.SEEK_END)
        end = pos = f.tell()
        count = 0
        # A trailing newline terminates the last line; it does not start a new one.
        skip_last = True
        while pos > 0:
            step = min(65536, pos)
            pos -= step
            f.seek(pos)
            block = f.read(step)
            for i in range(len(block) - 1, -1, -1):
                if block[i] == 0x0A:
                    if skip_last and pos + i == end - 1:
                        continue
                    count += 1
                    if count == lines:
                        return pos + i + 1
            skip_last = False
        return 0


async def tail_file(
    path: Path, follow: bool, tail: int, is_done: Callable[[], bool], poll: float = 0.05
) -> AsyncIterator[bytes]:
    """Yield the log's bytes (the last `tail` lines first when tail > 0). With follow, keep
    reading until is_done() was true before a read that hit EOF."""
    while not path.exists():
        if not follow or is_done():
            return
        await asyncio.sleep(poll)
    # File reads go to a worker thread: a big log must not stall the agent's event loop.
    loop = asyncio.get_running_loop()
    offset = await loop.run_in_executor(None, tail_offset, path, tail)
    f = await loop.run_in_executor(None, open, str(path), "rb")
    with f:
        f.seek(offset)
        while True:
            done = is_done()
            data = await loop.run_in_executor(None, f.read, CHUNK)
            if data:
                yield data
                continue
            if not follow or done:
                return
            await asyncio.sleep(poll)


async def tail_file_phased(
    path: Path, follow: bool, tail: int, is_done: Callable[[], bool],
    run_offset: Callable[[], int | None], poll: float = 0.05,
) -> AsyncIterator[tuple[str, bytes]]:
    """:func:`tail_file` with each chunk tagged "setup" or "run": bytes before the run
    phase's start offset are setup's. The offset is read AFTER each read, so bytes read
    while it is unknown were written before the run phase started."""
    while not path.exists():
        if not follow or is_done():
            return
        await asyncio.sleep(poll)
    pos = tail_offset(path, tail)
    with open(str(path), "rb") as f:
        f.seek(pos)
        while True:
            done = is_done()
            data = f.read(CHUNK)
            if data:
                start, pos = pos, pos + len(data)
                off = run_offset()
                if off is None or off >= pos:
                    yield "setup", data
                elif off <= start:
                    yield "run", data
                else:
                    yield "setup", data[: off - start]
                    yield "run", data[off - start:]
                continue
            if not follow or done:
                return
            await asyncio.sleep(poll)


async def merge_prefixed(
    streams: list[tuple[str, AsyncIterator[bytes]]],
    stop_after: Callable[[], bool] | None = None,
    drain_s: float = 5.0,
) -> AsyncIterator[bytes]:
    """Interleave several byte streams line by line, prefixing each line with its label.
    Once stop_after() is true, remaining streams get drain_s seconds to end."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=256)

    async def pump(label: str, it: AsyncIterator[bytes]) -> None:
        prefix, rest = label.encode(), b""
        try:
            async for chunk in it:
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                if lines:
                    await queue.put(b"".join(prefix + ln + b"\n" for ln in lines))
            if rest:
                await queue.put(prefix + rest + b"\n")
        except Exception as e:  # a node's stream failing must not end the others
            await queue.put(prefix + (f"[log stream ended: {e}]\n").encode())
        finally:
            await queue.put(None)

    tasks = [asyncio.ensure_future(pump(label, it)) for label, it in streams]
    live = len(tasks)
    deadline: float | None = None
    loop = asyncio.get_event_loop()
    try:
        while live:
            try:
                item = await asyncio.wait_for(queue.get(), 0.5)
            except asyncio.TimeoutError:
                if stop_after is not None and stop_after():
                    deadline = deadline or loop.time() + drain_s
                    if loop.time() >= deadline:
                        return
                continue
            if item is None:
                live -= 1
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()
