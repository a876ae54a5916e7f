"""Appending to the controllers' log files without touching the disk on the event loop.

``JobController.log`` is synchronous and called all over the controller; it hands each line
to one background thread that appends them (batched per file). ``flush()`` waits until
everything handed over so far is written (the reader of ``jobs logs --controller`` calls it
in a worker thread first)."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path


class AppendWriter:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: list[tuple[Path, str]] = []
        self._queued = 0  # lines handed over, ever
        self._written = 0  # lines written (or dropped on an OSError), ever
        self._thread: threading.Thread | None = None

    def append(self, path: Path, text: str) -> None:
        with self._cond:
            self._pending.append((path, text))
            self._queued += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="skyd-jobs-log", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float = 10.0) -> None:
        """Block until every line appended before this call is in its file."""
        with self._cond:
            target = self._queued
            self._cond.wait_for(lambda: self._written >= target, timeout=timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending))
                batch, self._pending = self._pending, []
            by_file: dict[Path, list[str]] = defaultdict(list)
            for path, text in batch:
                by_file[path].append(text)
            for path, texts in by_file.items():
                try:
                    with open(path, "a") as f:
                        f.write("".join(texts))
                except OSError:
                    pass  # a diagnostic log: never fail a job over it
            with self._cond:
                self._written += len(batch)
                self._cond.notify_all()


CONTROLLER_LOG = AppendWriter()
