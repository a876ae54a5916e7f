"""Node-local job queue in SQLite (WAL): jobs (the JobStatus machine), gang ranks, metadata.

Every state change is one committed transaction before it is reported. Python 3.8 compatible.
Calls are short and local (sub-millisecond with WAL), so they run on the event loop thread.
"""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import builtins
import json
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

INIT, PENDING, SETTING_UP, RUNNING = "INIT", "PENDING", "SETTING_UP", "RUNNING"
SUCCEEDED, FAILED, FAILED_SETUP = "SUCCEEDED", "FAILED", "FAILED_SETUP"
FAILED_DRIVER, CANCELLED = "FAILED_DRIVER", "CANCELLED"
STATUSES = [INIT, PENDING, SETTING_UP, RUNNING, SUCCEEDED, FAILED, FAILED_SETUP, FAILED_DRIVER,
            CANCELLED]  # fmt: skip
TERMINAL = frozenset([SUCCEEDED, FAILED, FAILED_SETUP, FAILED_DRIVER, CANCELLED])
ACTIVE = frozenset([SETTING_UP, RUNNING])
_ALLOWED = {
    INIT: {PENDING, FAILED, CANCELLED, FAILED_DRIVER},
    PENDING: {SETTING_UP, CANCELLED, FAILED, FAILED_DRIVER},
    SETTING_UP: {RUNNING, FAILED_SETUP, FAILED, FAILED_DRIVER, CANCELLED},
    RUNNING: {SUCCEEDED, FAILED, FAILED_DRIVER, CANCELLED},
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
  job_id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL DEFAULT '',
  spec TEXT NOT NULL,
  status TEXT NOT NULL,
  username TEXT NOT NULL DEFAULT '',
  submitted_at REAL NOT NULL,
  start_at REAL,
  end_at REAL,
  exit_code INTEGER,
  num_nodes INTEGER NOT NULL DEFAULT 1,
  cpus REAL NOT NULL DEFAULT 0,
  gpus INTEGER NOT NULL DEFAULT 0,
  gpu_slots TEXT NOT NULL DEFAULT '[]',
  task_id TEXT NOT NULL DEFAULT '',
  reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status);
CREATE TABLE IF NOT EXISTS ranks (
  job_id INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  phase TEXT NOT NULL,
  state TEXT NOT NULL,
  pid INTEGER,
  proc_start TEXT,
  exit_code INTEGER,
  gpu_slots TEXT NOT NULL DEFAULT '[]',
  started_at REAL NOT NULL,
  ended_at REAL,
  PRIMARY KEY (job_id, rank, phase)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class InvalidTransition(Exception):
    pass


class JobQueue:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(str(path), isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)

    def close(self) -> None:
        self.db.close()

    # ---- jobs -------------------------------------------------------------------------
    def add(self, spec: dict[str, Any], cluster: str = "",
            before_commit: Any = None) -> int:  # fmt: skip
        """Insert a PENDING job; ids start at 1 and are never reused. An empty task_id
        becomes SkyPilot's form sky-<timestamp>_<cluster>_<job id>. ``before_commit(job_id)``
        runs inside the transaction (an exception rolls the insert back)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            job_id = self._insert(spec, cluster)
            if before_commit is not None:
                before_commit(job_id)
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        return job_id

    def _insert(self, spec: dict[str, Any], cluster: str) -> int:
        nodes = max(1, int(spec.get("num_nodes") or 1))
        cur = self.db.execute(
            "INSERT INTO jobs (name, spec, status, username, submitted_at, num_nodes, cpus, gpus,"
            " task_id) VALUES (?,?,?,?,?,?,?,?,?)",
            (spec.get("name") or "", json.dumps(spec), PENDING, spec.get("username") or "",
             time.time(), nodes, float(spec.get("cpus") or 0), int(spec.get("gpus") or 0),
             spec.get("task_id") or ""),
        )  # fmt: skip
        job_id = int(cur.lastrowid or 0)
        if not spec.get("task_id"):
            now = time.time()
            stamp = time.strftime("%Y-%m-%d-%H-%M-%S", time.localtime(now))
            spec = dict(spec, task_id="sky-%s-%06d_%s_%d" % (stamp, int(now % 1 * 1e6), cluster,
                                                             job_id))  # fmt: skip
            self.db.execute("UPDATE jobs SET spec=?, task_id=? WHERE job_id=?",
                            (json.dumps(spec), spec["task_id"], job_id))  # fmt: skip
        return job_id

    def get(self, job_id: int) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        return _job(row) if row else None

    def list(
        self, skip_finished: bool = False, job_ids: Iterable[int] = ()
    ) -> builtins.list[dict[str, Any]]:
        ids = list(job_ids)
        sql = "SELECT * FROM jobs"
        args: list[Any] = []
        where = []
        if ids:
            where.append("job_id IN ({})".format(",".join("?" * len(ids))))
            args.extend(ids)
        if skip_finished:
            where.append("status NOT IN ({})".format(",".join("?" * len(TERMINAL))))
            args.extend(sorted(TERMINAL))
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_job(r) for r in self.db.execute(sql + " ORDER BY job_id", args)]

    def with_status(self, statuses: Iterable[str]) -> builtins.list[dict[str, Any]]:
        st = list(statuses)
        sql = "SELECT * FROM jobs WHERE status IN ({}) ORDER BY job_id".format(
            ",".join("?" * len(st))
        )
        return [_job(r) for r in self.db.execute(sql, st)]

    def latest_id(self) -> int | None:
        row = self.db.execute("SELECT MAX(job_id) FROM jobs").fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def set_status(self, job_id: int, status: str, **fields: Any) -> dict[str, Any]:
        """Move a job to `status` (checked against the machine) and persist extra fields."""
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        if status != job["status"] and status not in _ALLOWED.get(job["status"], set()):
            raise InvalidTransition("%s -> %s (job %d)" % (job["status"], status, job_id))
        now = time.time()
        if status in ACTIVE and not job["start_at"]:
            fields.setdefault("start_at", now)
        if status in TERMINAL:
            fields.setdefault("end_at", now)
        if "gpu_slots" in fields:
            fields["gpu_slots"] = json.dumps(list(fields["gpu_slots"]))
        cols = ["status"] + sorted(fields)
        self.db.execute(
            "UPDATE jobs SET {} WHERE job_id=?".format(",".join(f"{c}=?" for c in cols)),
            [status] + [fields[c] for c in cols[1:]] + [job_id],
        )
        return self.get(job_id) or job

    # ---- gang ranks (also used for rank 0 on the head) ---------------------------------
    def rank(self, job_id: int, rank: int, phase: str) -> dict[str, Any] | None:
        row = self.db.execute(
            "SELECT * FROM ranks WHERE job_id=? AND rank=? AND phase=?", (job_id, rank, phase)
        ).fetchone()
        return _rank(row) if row else None

    def ranks_of(self, job_id: int, rank: int) -> builtins.list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM ranks WHERE job_id=? AND rank=?", (job_id, rank))
        return [_rank(r) for r in rows]

    def running_ranks(self) -> builtins.list[dict[str, Any]]:
        return [_rank(r) for r in self.db.execute("SELECT * FROM ranks WHERE state='running'")]

    def put_rank(self, job_id: int, rank: int, phase: str, **fields: Any) -> None:
        if "gpu_slots" in fields:
            fields["gpu_slots"] = json.dumps(list(fields["gpu_slots"]))
        if self.rank(job_id, rank, phase) is None:
            fields.setdefault("state", "starting")
            fields.setdefault("started_at", time.time())
            cols = ["job_id", "rank", "phase"] + sorted(fields)
            vals = [job_id, rank, phase] + [fields[c] for c in cols[3:]]
            self.db.execute(
                "INSERT INTO ranks ({}) VALUES ({})".format(
                    ",".join(cols), ",".join("?" * len(cols))
                ),
                vals,
            )
            return
        cols = sorted(fields)
        self.db.execute(
            "UPDATE ranks SET {} WHERE job_id=? AND rank=? AND phase=?".format(
                ",".join(f"{c}=?" for c in cols)
            ),
            [fields[c] for c in cols] + [job_id, rank, phase],
        )

    # ---- metadata ---------------------------------------------------------------------
    def meta(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_meta(self, key: str, value: Any) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            (key, json.dumps(value)),
        )


def _job(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["spec"] = json.loads(d["spec"])
    d["gpu_slots"] = json.loads(d["gpu_slots"])
    return d


def _rank(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["gpu_slots"] = json.loads(d["gpu_slots"])
    return d
