"""What handlers get: RequestContext (mutating verbs) and ReadContext (reads)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
from anyio.abc import TaskGroup

from skyd.daemon.store import Store, dumps, dumps_finite
from skyd.errors import SkydError

if TYPE_CHECKING:
    from aiohttp import web

    from skyd.daemon.bus import EventBus
    from skyd.daemon.host import Host

StageState = Literal["start", "done", "failed", "skipped"]
TERMINAL_EVENTS = ("result", "error")


class RequestContext:
    """Passed to a verb handler; one per request.

    Attributes: ``request_id``, ``verb``, ``payload`` (validated dict), ``store``,
    ``daemon``, ``bus``, ``root_tg`` (the daemon's root task group; prefer
    ``daemon.spawn``), ``tg`` (this request's own task group: children die with the
    request), ``cancel_scope`` (this request's scope; cancelled by ``requests cancel``),
    ``resumed`` (True when re-invoked after a daemon restart).

    Events go to the request's ndjson log file (the replay source) and wake followers.
    ``emit`` is synchronous and cheap: it queues the line; a flusher task in the daemon's
    root task group appends the queued lines in a worker thread (one write per batch) and
    only then wakes followers, so whatever a follower was shown is already in the file.
    """

    __slots__ = (
        "request_id", "verb", "payload", "daemon", "store", "bus", "cancel_scope", "tg",
        "resumed", "log_path", "_pending", "_flushing", "_write_lock", "_seq", "_changed",
        "_stage_starts", "_stages", "_partial", "finished", "done", "shutdown",
        "storage_error", "dropped", "user",
    )

    def __init__(
        self,
        request_id: str,
        verb: str,
        payload: dict[str, Any],
        daemon: Host,
        log_path: Path,
        *,
        resumed: bool = False,
    ) -> None:
        self.request_id = request_id
        self.verb = verb
        self.payload = payload
        self.daemon = daemon
        self.store: Store = daemon.store
        self.bus: EventBus = daemon.bus
        self.cancel_scope = anyio.CancelScope()
        self.tg: TaskGroup | None = None
        self.resumed = resumed
        self.log_path = log_path
        self._pending: list[bytes] = []  # serialized events not yet in the log file
        self._flushing = False
        self._write_lock = anyio.Lock()
        self._seq = 0
        self._changed: anyio.Event | None = None
        self._stage_starts: dict[str, float] = {}
        self._stages: list[dict[str, Any]] = []
        self._partial: dict[str, Any] = {}
        self.finished = False
        self.done = anyio.Event()
        self.shutdown = False  # set when the daemon (not a user) cancels the request
        self.storage_error: SkydError | None = None  # set when its writes fail (full disk)
        self.dropped = 0  # events that could not be written
        self.user: str | None = None  # who submitted it (skyd.daemon.owners)

    @property
    def root_tg(self) -> TaskGroup:
        return self.daemon.tg

    # -- events ----------------------------------------------------------------------
    def emit(self, event: dict[str, Any]) -> None:
        """Queue one event (a dict with a ``type``) for the log; followers wake once it is
        written."""
        self._seq += 1
        ev = {"seq": self._seq, "ts": round(time.time(), 3), **event}
        self._pending.append((dumps_finite(ev) + "\n").encode())
        if not self._flushing:
            self._flushing = True
            try:
                self.daemon.tg.start_soon(self._flush_loop, name=f"request {self.request_id} log")
            except RuntimeError:  # no root task group (stopping): close_log writes them
                self._flushing = False

    async def _flush_loop(self) -> None:
        try:
            while self._pending:
                await self.flush()
        finally:
            self._flushing = False

    async def flush(self) -> None:
        """Append every queued event to the log file (in a worker thread), then wake
        followers. Lines leave the queue only once written: a cancelled flush loses none.

        A write that fails (a full disk) never reaches the daemon's root group: the partial
        write is undone, the lines are dropped (counted), the disk reserve is released and
        the request is failed with "disk full at PATH" (:meth:`storage_failed`)."""
        async with self._write_lock:
            n = len(self._pending)
            if n == 0:
                return
            try:
                await anyio.to_thread.run_sync(_append, self.log_path,
                                               b"".join(self._pending[:n]))
            except OSError as e:
                from skyd.daemon import diskspace

                del self._pending[:n]
                self.dropped += n
                if diskspace.is_full(e):
                    diskspace.release()
                    self.storage_failed(SkydError(
                        f"disk full at {self.log_path}: the request's events could not be "
                        f"written ({n} dropped)",
                        hint=f"free space on the filesystem holding {self.log_path.parent}; "
                             "skyd goes on by itself once there is room"))
                else:
                    self.storage_failed(SkydError(
                        f"cannot write {self.log_path}: {e.strerror or e}",
                        hint="check that SKYD_HOME is writable"))
                return
            del self._pending[:n]
        self.notify()

    def storage_failed(self, err: SkydError) -> None:
        """The request cannot go on writing its state: it ends FAILED with ``err``."""
        if self.storage_error is None:
            self.storage_error = err
        if not self.finished:
            self.cancel_scope.cancel()

    def notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def changed_event(self) -> anyio.Event:
        """An event set at the next emit (followers: get it BEFORE reading the file)."""
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    def log(self, text: str) -> None:
        """A log line (or lines) of the request: shown by ``requests logs`` and followers."""
        self.emit({"type": "log", "text": text if text.endswith("\n") else text + "\n"})

    async def stage(self, name: str, state: StageState, **info: Any) -> None:
        """Record a pipeline stage transition: persisted in the row, then emitted."""
        now = time.time()
        elapsed: float | None = None
        if state == "start":
            self._stage_starts[name] = now
        elif name in self._stage_starts:
            elapsed = round(now - self._stage_starts[name], 3)
        entry = {"name": name, "state": state, "ts": round(now, 3), "elapsed": elapsed, **info}
        for i, s in enumerate(self._stages):
            if s["name"] == name:
                self._stages[i] = entry
                break
        else:
            self._stages.append(entry)
        await self.store.execute(
            "UPDATE requests SET stages = ? WHERE id = ?", (dumps(self._stages), self.request_id)
        )
        self.emit({"type": "stage", **entry})

    async def set_result_partial(self, data: dict[str, Any]) -> None:
        """Merge ``data`` into the (not yet final) result, e.g. the cluster name early.

        A ``cluster_name`` key also fills the row's ``cluster_name`` column.
        """
        self._partial.update(data)
        cluster = self._partial.get("cluster_name")
        await self.store.execute(
            "UPDATE requests SET result = ?, cluster_name = COALESCE(?, cluster_name) WHERE id = ?",
            (dumps(self._partial), cluster, self.request_id),
        )
        self.emit({"type": "partial", "data": data})

    @property
    def partial_result(self) -> dict[str, Any]:
        return dict(self._partial)

    async def close_log(self) -> None:
        """Write what is still queued (call it shielded: the request is ending)."""
        await self.flush()


def _append(path: Path, data: bytes) -> None:
    """Append whole lines or nothing: a write cut short (ENOSPC) is truncated away, so a
    reader never sees half a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


class ReadContext:
    """Passed to read handlers: ``daemon``, ``store``, ``bus`` and ``body`` (the validated
    body as a dict when the read declared a body model, else the raw JSON body or None)."""

    __slots__ = ("daemon", "store", "bus", "body")

    def __init__(self, daemon: Host, body: Any = None) -> None:
        self.daemon = daemon
        self.store = daemon.store
        self.bus = daemon.bus
        self.body = body

    async def stream_ndjson(
        self, request: web.Request, items: AsyncIterable[Any]
    ) -> web.StreamResponse:
        """Answer with a chunked ndjson stream of ``items`` (ends when they do)."""
        from skyd.daemon.http import stream_ndjson

        return await stream_ndjson(request, items)
