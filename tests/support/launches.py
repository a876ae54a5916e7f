"""Launch requests as the SDK sends them, and what their event streams say: the helpers the
cloud end-to-end modules share (a real daemon must be running for the module)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from skyd.sdk.transport import Client
from tests.support.pipeline import write

__all__ = ["submit_launch", "request_events", "launch_events", "failed_attempts", "events_text",
           "cluster_row", "nothing_left_on"]

Event = dict[str, Any]


def submit_launch(tmp_path: Path, name: str, text: str) -> str:
    """Submit a launch of the task ``text`` as cluster ``name``; the request id."""
    y = write(tmp_path / f"{name}.yaml", text)
    with Client(autostart=False) as c:
        return c.submit("launch", {"yaml": y.read_text(), "yaml_path": str(y),
                                   "base_dir": str(tmp_path), "cluster_name": name})


def request_events(rid: str, follow: bool = True) -> list[Event]:
    with Client(autostart=False) as c:
        return list(c.events(rid, follow))


def launch_events(tmp_path: Path, name: str, text: str) -> list[Event]:
    """Launch and follow to the end: every event of the request."""
    return request_events(submit_launch(tmp_path, name, text))


def _first_word(target: str) -> str:
    return target.split()[0]


def failed_attempts(evs: list[Event], where: Callable[[str], str] = _first_word) -> list[tuple[str, str]]:
    """(where, scope) of every failed provisioning attempt, in order; ``where`` reads the
    attempt's target ("runpod/US-TX-3 (MI300X:8)" -> "runpod/US-TX-3" by default)."""
    return [(where(e["target"]), e["scope"]) for e in evs
            if e.get("type") == "stage" and e.get("name") == "PROVISION" and e.get("state") == "failed"]


def events_text(evs: list[Event], keys: tuple[str, ...] = ("text", "error", "reason")) -> str:
    """Everything the events say, as one string to search."""
    return " ".join("".join(str(e.get(k, "")) for k in keys) for e in evs)


def cluster_row(home: Path, name: str) -> dict[str, Any] | None:
    """The cluster's row in the daemon's state.db, read-only (None when there is none)."""
    con = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        r = con.execute("SELECT * FROM clusters WHERE name = ?", (name,)).fetchone()
        return dict(r) if r else None
    finally:
        con.close()


@contextmanager
def nothing_left_on(*fakes: Any) -> Iterator[None]:
    """Stop the fakes when the block ends, and fail if skyd left anything live on one of them
    (each fake has live() and stop())."""
    try:
        yield
    finally:
        left = {f"{type(f).__name__}#{i}": f.live() for i, f in enumerate(fakes) if f.live()}
        for f in fakes:
            f.stop()
    assert not left, f"left on the fakes: {left}"
