"""End every process a node's jobs started, from the agent's records alone (no live agent).

Every phase of every rank runs as its own process group (session). The group id is recorded
twice: in the agent's jobs.db (``ranks.pid`` with the leader's start time) right after the
start, and by the job's wrapper itself in ``jobs/<id>/rank-<r>.<phase>.exit.pgid`` as its
first act, so a group is on disk even when the agent died in between. Whoever tears a node
down (the agent on cancel, the daemon on ``down``/``stop`` after the agent died, a restarted
agent) can therefore end every group. Python 3.8 compatible, stdlib only.
"""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

PGID_SUFFIX = ".pgid"


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def _group_members(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(name))
    return out


def _cmdline(pid: int) -> str:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def recorded_groups(home: Path) -> set[int]:
    """Process groups of this node's jobs that still have a live member."""
    home = Path(home).resolve()
    candidates: dict[int, Any] = {}  # pgid -> leader start time recorded (None: unknown)
    db = home / "jobs.db"
    if db.exists():
        try:
            conn = sqlite3.connect(str(db), timeout=5)
            try:
                for pid, start in conn.execute("SELECT pid, proc_start FROM ranks WHERE pid IS NOT NULL"):
                    candidates[int(pid)] = start
            finally:
                conn.close()
        except sqlite3.Error:
            pass
    jobs = home / "jobs"
    if jobs.is_dir():
        for f in jobs.glob("*/*" + PGID_SUFFIX):
            try:
                candidates.setdefault(int(f.read_text().strip()), None)
            except (OSError, ValueError):
                continue
    if not os.path.isdir("/proc"):
        return set(candidates)
    live = set()
    marker = str(home / "jobs") + "/"
    for pgid, start in candidates.items():
        members = _group_members(pgid)
        if not members:
            continue
        if pgid in members:  # the leader (our wrapper) still runs: make sure it is ours
            fields = _stat_fields(pgid)
            same_start = start is not None and fields is not None and fields[19] == start
            if not same_start and marker not in _cmdline(pgid):
                continue  # the pid was reused by an unrelated process
        # A group whose leader is gone keeps its id reserved: its members are ours.
        live.add(pgid)
    return live


def kill_recorded_groups(home: Path, grace: float = 3.0) -> int:
    """SIGTERM every live job group of this node, SIGKILL after `grace`. Returns how many
    groups there were. Blocking (call it from a worker thread in async code)."""
    groups = recorded_groups(home)
    if not groups:
        return 0
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 2.0)
        left = set(groups)
        while left and time.monotonic() < deadline:
            left = {g for g in left if _group_members(g)}
            if left:
                time.sleep(0.05)
        if not left:
            break
    return len(groups)
