"""Helpers for the TUI tests and bench: seed a daemon's SQLite, run the daemon, read screens."""

from __future__ import annotations

import html
import os
import re
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from skyd import paths


def seed_db(clusters: list[dict[str, Any]] = (), managed: int = 0) -> Path:  # type: ignore[assignment]
    """Create the daemon's state DB (the core's schema and the features') with rows in it,
    before the daemon starts (its status cache only sees its own writes)."""
    import anyio

    from skyd.daemon.store import Store
    from skyd.jobs import schema as _jobs  # noqa: F401 - the features' tables
    from skyd.pipeline import schema as _pipeline  # noqa: F401

    db = paths.db_path()

    async def migrate() -> None:  # the daemon's own migrations, whatever their kind
        st = Store(db)
        await st.open()
        await st.close()

    anyio.run(migrate)
    con = sqlite3.connect(db)
    now = time.time()
    for c in clusters:
        row = {"status": "UP", "num_nodes": 1, "launched_at": now - 3600, **c}
        cols = ",".join(row)
        con.execute(f"INSERT INTO clusters ({cols}) VALUES ({','.join('?' * len(row))})",
                    list(row.values()))
    statuses = ("RUNNING", "SUCCEEDED", "RECOVERING", "FAILED", "PENDING")
    con.executemany(
        "INSERT INTO managed_jobs (name, status, schedule_state, submitted_at, started_at, "
        "ended_at, recoveries, cluster) VALUES (?,?,?,?,?,?,?,?)",
        [(f"mj-{i}", statuses[i % 5], "ALIVE", now - 7200 + i, now - 7000 + i,
          None if i % 5 != 1 else now - 100, i % 3, f"mj-cluster-{i}") for i in range(managed)],
    )
    con.commit()
    con.close()
    return db


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    from tests.support import forkserver
    from tests.support.daemon import SKYD_BIN

    return forkserver.run([str(SKYD_BIN), *args],
                       dict(os.environ) if env is None else env, timeout=timeout)


def start_daemon() -> None:
    out = cli("daemon", "start")
    assert out.returncode == 0, out.stderr


def stop_daemon() -> None:
    cli("daemon", "stop")


def screen_text(app: Any) -> str:
    """The rendered screen as plain text (from the SVG screenshot)."""
    svg = app.export_screenshot()
    lines = re.findall(r"<text[^>]*>(.*?)</text>", svg, flags=re.S)
    text = "".join(html.unescape(re.sub(r"<[^>]+>", "", ln)) for ln in lines)
    return text.replace("\xa0", " ")


async def wait_for(pilot: Any, cond: Any, timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await pilot.pause(0.05)
