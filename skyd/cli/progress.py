"""Render a request's event stream: one status line per stage, logs raw.

``follow_request(client, request_id)`` is what ``skyd launch`` & co. call after submitting.
On a TTY a stage shows as a live spinner line (``⠋ Provisioning… 1.2s``) that becomes
``✓ Provisioned (1.4s)``; otherwise (a pipe, a file, CI) only the end line, with no control
characters. Stage lines go to stderr, ``log``/``job_log`` text to stdout unchanged. The plan
an OPTIMIZE stage carries (``plan``) is printed to stderr after it, unless ``show_plan`` is
off (the launch prompt showed it already).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from skyd.errors import SkydError, error_from_dict
from skyd.human import duration

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
# stage name -> (in-progress label, done label)
LABELS: dict[str, tuple[str, str]] = {
    "optimize": ("Optimizing", "Optimized"),
    "provision": ("Provisioning", "Provisioned"),
    "sync_workdir": ("Syncing workdir", "Synced workdir"),
    "sync_file_mounts": ("Syncing file mounts", "Synced file mounts"),
    "setup": ("Running setup", "Setup done"),
    "pre_exec": ("Preparing to run", "Ready to run"),
    "exec": ("Running job", "Job finished"),
    "down": ("Tearing down", "Torn down"),
    "stop": ("Stopping", "Stopped"),
    "start": ("Starting", "Started"),
    "clone_disk": ("Cloning disk", "Cloned disk"),
}


class Detached(SkydError):
    """Ctrl-C while following: the request keeps running in the daemon."""

    exit_code = 130


def stage_labels(name: str, info: dict[str, Any]) -> tuple[str, str]:
    base = LABELS.get(name.lower(), (name.replace("_", " ").capitalize(),) * 2)
    return str(info.get("label") or base[0]), str(info.get("done_label") or base[1])


class StageRenderer:
    def __init__(self, out: TextIO, err: TextIO, tty: bool | None = None,
                 show_plan: bool = True) -> None:
        self.out, self.err = out, err
        self.tty = err.isatty() if tty is None else tty
        self.show_plan = show_plan
        self.lock = threading.Lock()
        self.active: tuple[str, float] | None = None  # (label, started monotonic)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._frame = 0

    # TTY spinner --------------------------------------------------------------------
    def _draw(self) -> None:
        if self.active is None:
            return
        label, t0 = self.active
        self._frame = (self._frame + 1) % len(SPINNER)
        self.err.write(f"\r\x1b[2K{SPINNER[self._frame]} {label}… {time.monotonic() - t0:.1f}s")
        self.err.flush()

    def _clear(self) -> None:
        if self.tty and self.active is not None:
            self.err.write("\r\x1b[2K")
            self.err.flush()

    def _spin(self) -> None:
        while not self._stop.wait(0.1):
            with self.lock:
                self._draw()

    def close(self) -> None:
        self._stop.set()
        with self.lock:
            self._clear()
            self.active = None

    # events -------------------------------------------------------------------------
    def stage(self, ev: dict[str, Any]) -> None:
        name, state = str(ev.get("name", "?")), str(ev.get("state", "?"))
        doing, done = stage_labels(name, ev)
        elapsed = ev.get("elapsed")
        el = f" ({duration(float(elapsed))})" if elapsed is not None else ""
        with self.lock:
            self._clear()
            if state == "start":
                self.active = (doing, time.monotonic())
                if self.tty:
                    self._draw()
                    if self._thread is None:
                        self._thread = threading.Thread(target=self._spin, daemon=True)
                        self._thread.start()
                return
            self.active = None
            if state == "done":
                self.err.write(f"✓ {done}{el}\n")
                if self.show_plan and ev.get("plan"):
                    self.err.write(str(ev["plan"]).rstrip("\n") + "\n")
            elif state == "failed":
                reason = ev.get("reason") or ev.get("error") or ""
                self.err.write(f"✗ {doing} failed{el}{': ' + str(reason) if reason else ''}\n")
            elif state == "skipped":
                self.err.write(f"- {doing} skipped\n")
            else:
                self.err.write(f"  {name}: {state}\n")
            self.err.flush()

    def note(self, text: str) -> None:
        with self.lock:
            self._clear()
            self.err.write(text + "\n")
            self.err.flush()

    def text(self, text: str) -> None:
        with self.lock:
            self._clear()
            self.out.write(text)
            self.out.flush()
            if self.tty and self.active is not None:
                self._draw()


def render_events(events: Any, *, out: TextIO | None = None, err: TextIO | None = None,
                  tty: bool | None = None, show_plan: bool = True) -> tuple[bool, Any]:
    """Render an event iterator; returns (finished, result) and raises the request's error."""
    r = StageRenderer(out or sys.stdout, err or sys.stderr, tty, show_plan)
    try:
        for ev in events:
            t = ev.get("type")
            if t == "stage":
                r.stage(ev)
            elif t in ("log", "job_log"):
                r.text(str(ev.get("text", "")))
            elif t == "reattach":  # the daemon restarted under the stream
                r.note(str(ev.get("text", "")))
            elif t == "result":
                return True, ev.get("result")
            elif t == "error":
                raise error_from_dict(ev.get("error") or {})
        return False, None
    finally:
        r.close()


def wait_result(client: Any, request_id: str) -> dict[str, Any]:
    """The request's result, waited for quietly (no progress lines); its error raised."""
    for ev in client.events(request_id, True):
        if ev.get("type") == "result":
            return dict(ev.get("result") or ev.get("data") or {})
        if ev.get("type") == "error":
            raise error_from_dict(ev.get("error") or ev)
    row = client.get(f"/v1/requests/{request_id}")
    return dict(row.get("result") or {})


def follow_request(client: Any, request_id: str, *, out: TextIO | None = None,
                   err: TextIO | None = None, tty: bool | None = None,
                   show_plan: bool = True) -> Any:
    """Follow a request to its end: render its events, return its result or raise its
    error (a SkydError). Ctrl-C detaches (raises Detached, exit code 130)."""
    try:
        finished, result = render_events(client.events(request_id, True), out=out, err=err,
                                         tty=tty, show_plan=show_plan)
    except KeyboardInterrupt:
        raise Detached(
            f"detached from request {request_id}; it keeps running",
            hint=f"re-attach: skyd requests logs {request_id} --follow; "
                 f"stop it: skyd requests cancel {request_id}",
        ) from None
    if not finished:
        raise SkydError(f"the event stream of request {request_id} ended early",
                        hint=f"re-attach: skyd requests logs {request_id} --follow")
    return result
