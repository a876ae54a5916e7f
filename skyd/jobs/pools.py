"""Managed-job worker pools: N long-lived worker clusters `<pool>-w<i>` that managed jobs
submitted with `--pool` run on, one job per worker at a time.

State (tables job_pools / job_pool_workers, the `jobs` component, skyd.jobs.schema) is committed
before anything acts on it: a worker row (PROVISIONING) exists before its cluster is
launched, a row is TERMINATING before its cluster is torn down, and a job's claim on a
worker (job_pool_workers.job_id) is one transaction. Worker status: PROVISIONING → READY |
FAILED; TERMINATING → (row deleted). Pool status: READY | TERMINATING.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from typing import TYPE_CHECKING, Any

import anyio

from skyd.daemon.owners import acting_as, current_user
from skyd.errors import InvalidSpecError, NotFoundError
from skyd.jobs.ops import ClusterOps, LogFn, TaskSpec
from skyd.jobs.state import JobsDB

if TYPE_CHECKING:
    from skyd.jobs.manager import Spawn

logger = logging.getLogger("skyd.jobs.pools")
SETUP_DONE = ("SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED")


def worker_name(pool: str, idx: int) -> str:
    return f"{pool}-w{idx}"


class PoolManager:
    def __init__(self, db: JobsDB, ops: ClusterOps, spawn: Spawn, poll: float = 0.2) -> None:
        self.db = db
        self.ops = ops
        self.spawn = spawn
        self.poll = poll
        self._changed = anyio.Event()
        self._busy: dict[str, anyio.Event] = {}  # worker cluster → its provisioning/teardown

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # -- reads ----------------------------------------------------------------------------

    async def get(self, name: str) -> dict[str, Any] | None:
        return await self.db.fetchone("SELECT * FROM job_pools WHERE name=?", (name,))

    async def pools(self) -> list[dict[str, Any]]:
        return await self.db.fetchall("SELECT * FROM job_pools ORDER BY name")

    async def workers(self, name: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM job_pool_workers"
        params: tuple[str, ...] = ()
        if name is not None:
            sql, params = sql + " WHERE pool=?", (name,)
        return await self.db.fetchall(sql + " ORDER BY pool, idx", params)

    async def is_worker(self, cluster: str) -> bool:
        row = await self.db.fetchone("SELECT 1 FROM job_pool_workers WHERE cluster=?", (cluster,))
        return row is not None

    async def require(self, name: str) -> dict[str, Any]:
        row = await self.get(name)
        if row is None or row["status"] != "READY":
            raise NotFoundError(f"no worker pool {name!r}" + (" (it is going down)" if row else ""),
                                field="pool", hint="see `skyd jobs pool status`; create one with "
                                "`skyd jobs pool apply POOL.yaml -p NAME`")  # fmt: skip
        return row

    # -- apply / down ---------------------------------------------------------------------

    async def apply(self, name: str, task: dict[str, Any], workers: int, log: LogFn) -> list[str]:
        """Create or resize the pool (persisted first), then provision the new workers and
        tear down the surplus ones (idle ones first). Waits for both; returns the workers'
        cluster names."""
        if workers < 0:
            raise InvalidSpecError(f"workers must be >= 0 (got {workers})", field="pool.workers",
                                   hint="give --workers N with N >= 0")  # fmt: skip
        now = time.time()
        task_json = json.dumps(task)
        user = current_user()

        def fn(db: sqlite3.Connection) -> None:
            row = db.execute("SELECT status FROM job_pools WHERE name=?", (name,)).fetchone()
            if row is not None and row[0] != "READY":
                raise InvalidSpecError(f"worker pool {name!r} is going down", field="pool",
                                       hint="wait for `skyd jobs pool down` to finish")  # fmt: skip
            db.execute(
                "INSERT INTO job_pools (name, task, workers, status, created_at, updated_at, user)"
                " VALUES (?, ?, ?, 'READY', ?, ?, ?) ON CONFLICT(name) DO UPDATE SET"
                " task=excluded.task, workers=excluded.workers, updated_at=excluded.updated_at",
                (name, task_json, workers, now, now, user),
            )
            db.execute("UPDATE job_pool_workers SET status='PROVISIONING', reason=NULL WHERE"
                       " pool=? AND status='FAILED'", (name,))  # a re-apply retries them
            rows = db.execute("SELECT idx, status, job_id FROM job_pool_workers WHERE pool=?"
                              " AND status!='TERMINATING'", (name,)).fetchall()  # fmt: skip
            have = len(rows)
            if have > workers:  # idle first, then the newest
                order = sorted(rows, key=lambda r: (r[2] is None, r[0]), reverse=True)
                for r in order[: have - workers]:
                    db.execute("UPDATE job_pool_workers SET status='TERMINATING' WHERE pool=?"
                               " AND idx=?", (name, r[0]))  # fmt: skip
            used = {r[0] for r in db.execute(
                "SELECT idx FROM job_pool_workers WHERE pool=?", (name,)).fetchall()}  # fmt: skip
            idx = 0
            for _ in range(workers - have):
                while idx in used:
                    idx += 1
                used.add(idx)
                db.execute("INSERT INTO job_pool_workers (pool, idx, cluster, status)"
                           " VALUES (?, ?, ?, 'PROVISIONING')",
                           (name, idx, worker_name(name, idx)))  # fmt: skip

        await self.db.write(fn)
        await self._converge(name, log)
        return [w["cluster"] for w in await self.workers(name)]

    async def down(self, name: str, log: LogFn) -> None:
        """Cancel the pool's jobs, tear every worker down, forget the pool."""
        def fn(db: sqlite3.Connection) -> bool:
            cur = db.execute("UPDATE job_pools SET status='TERMINATING', updated_at=? WHERE"
                             " name=?", (time.time(), name))  # fmt: skip
            if cur.rowcount != 1:
                return False
            db.execute("UPDATE job_pool_workers SET status='TERMINATING' WHERE pool=?", (name,))
            return True

        if not await self.db.write(fn):
            raise NotFoundError(f"no worker pool {name!r}", field="pool",
                                hint="see `skyd jobs pool status`")  # fmt: skip
        self._notify()
        await self._converge(name, log)

    async def _converge(self, name: str, log: LogFn) -> None:
        """Drive every worker of the pool to what its row says (also used at resume). The
        workers' clusters are the pool owner's, whoever (or a restarted daemon) drives it."""
        pool = await self.get(name)
        if pool is None:
            return
        with acting_as(pool.get("user")):
            await self._converge_pool(name, pool, log)

    async def _converge_pool(self, name: str, pool: dict[str, Any], log: LogFn) -> None:
        from skyd.jobs.manager import current_manager

        if pool["status"] == "TERMINATING":  # cancel the jobs on the workers first
            ids = []  # the pool's unfinished jobs: running on a worker or waiting for one
            for j in await self.db.list_jobs(skip_finished=True):
                row = await self.db.get_job(int(j["id"]))
                if row is not None and json.loads(row["dag"]).get("pool") == name:
                    ids.append(int(j["id"]))
            try:
                m = current_manager()
            except RuntimeError:
                m = None
            if ids and m is not None:
                log(f"cancelling managed job(s) {ids} of pool {name}")
                await m.cancel(ids=ids)
                for i in ids:
                    await m.wait(i)
        task = json.loads(pool["task"])
        async with anyio.create_task_group() as tg:
            for w in await self.workers(name):
                if w["status"] == "PROVISIONING":
                    tg.start_soon(self._provision, w, task, log)
                elif w["status"] == "TERMINATING" and not w["job_id"]:
                    tg.start_soon(self._remove, w, log)
        if pool["status"] == "TERMINATING":
            def fn(db: sqlite3.Connection) -> None:
                left = db.execute("SELECT COUNT(*) FROM job_pool_workers WHERE pool=?",
                                  (name,)).fetchone()[0]  # fmt: skip
                if left == 0:
                    db.execute("DELETE FROM job_pools WHERE name=?", (name,))

            await self.db.write(fn)

    async def _set(self, w: dict[str, Any], fields: dict[str, Any]) -> None:
        sets = ",".join(f"{k}=?" for k in fields)

        def fn(db: sqlite3.Connection) -> None:
            db.execute(f"UPDATE job_pool_workers SET {sets} WHERE pool=? AND idx=?",
                       (*fields.values(), w["pool"], w["idx"]))  # fmt: skip

        await self.db.write(fn)
        self._notify()

    async def _provision(self, w: dict[str, Any], task: dict[str, Any], log: LogFn) -> None:
        """Launch the worker cluster with the pool's resources/setup/file_mounts; the
        setup runs as the worker's first job (its log is `skyd jobs pool logs`)."""
        cluster = str(w["cluster"])
        spec = TaskSpec(name=cluster, task={k: v for k, v in task.items() if k != "run"}, job_id=0,
                        task_index=int(w["idx"]), attempt=1,
                        envs={"SKYPILOT_POOL_NAME": str(w["pool"])})  # fmt: skip
        log(f"worker {cluster}: launching")
        try:
            res = await self.ops.launch(spec, cluster, blocked=[], log=log)
            await self._set(w, {"setup_job_id": res.job_id})
            while True:
                info = await self.ops.job_status(cluster, res.job_id)
                if info is not None and info.status in SETUP_DONE:
                    break
                await anyio.sleep(self.poll)
        except Exception as e:  # noqa: BLE001 - the worker is FAILED with the reason
            logger.warning("pool worker %s: %r", cluster, e)
            await self._set(w, {"status": "FAILED", "reason": str(e)})
            log(f"worker {cluster}: FAILED ({e})")
            return
        if info.status != "SUCCEEDED":
            await self._set(w, {"status": "FAILED", "reason": f"setup {info.status}"})
            log(f"worker {cluster}: setup {info.status}")
            return
        await self._set(w, {"status": "READY", "reason": None})
        log(f"worker {cluster}: READY")

    async def _remove(self, w: dict[str, Any], log: LogFn) -> None:
        log(f"worker {w['cluster']}: tearing down")
        await self.ops.teardown(str(w["cluster"]))

        def fn(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM job_pool_workers WHERE pool=? AND idx=?", (w["pool"], w["idx"]))

        await self.db.write(fn)
        self._notify()

    async def resume(self) -> None:
        """Daemon start: finish what each pool's rows say (in the background)."""
        for p in await self.pools():
            if any(w["status"] in ("PROVISIONING", "TERMINATING") for w in await self.workers(p["name"])):
                self.spawn(f"pool-{p['name']}", self._converge, p["name"], lambda _: None)

    # -- jobs -----------------------------------------------------------------------------

    async def acquire(self, pool: str, job_id: int) -> str:
        """The worker cluster this job runs on: the one it already holds, else a free READY
        worker (claimed in one transaction), else wait for one."""
        def fn(db: sqlite3.Connection) -> str | None:
            p = db.execute("SELECT status FROM job_pools WHERE name=?", (pool,)).fetchone()
            if p is None:
                raise NotFoundError(f"worker pool {pool!r} is gone", field="pool")
            if p[0] != "READY":  # going down: its `down` cancels this job
                return None
            row = db.execute("SELECT cluster FROM job_pool_workers WHERE pool=? AND job_id=?",
                             (pool, job_id)).fetchone()  # fmt: skip
            if row is not None:
                return str(row[0])
            row = db.execute("SELECT idx, cluster FROM job_pool_workers WHERE pool=? AND"
                             " status='READY' AND job_id IS NULL ORDER BY idx LIMIT 1",
                             (pool,)).fetchone()  # fmt: skip
            if row is None:
                return None
            db.execute("UPDATE job_pool_workers SET job_id=?, last_job_id=? WHERE pool=? AND"
                       " idx=?", (job_id, job_id, pool, row[0]))  # fmt: skip
            return str(row[1])

        while True:
            changed = self._changed
            got = await self.db.write(fn)
            if got is not None:
                return got
            with anyio.move_on_after(1.0):  # also polls: a worker freed by another process
                await changed.wait()

    async def release(self, job_id: int) -> None:
        """The job is done with its worker; a worker being removed goes now."""
        if await self.db.fetchone("SELECT 1 FROM job_pool_workers WHERE job_id=?",
                                  (job_id,)) is None:  # not a pool job (or already handed back)
            return

        def fn(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            rows = db.execute("SELECT pool, idx, cluster, status FROM job_pool_workers WHERE"
                              " job_id=?", (job_id,)).fetchall()  # fmt: skip
            db.execute("UPDATE job_pool_workers SET job_id=NULL WHERE job_id=?", (job_id,))
            return [tuple(r) for r in rows]

        rows = await self.db.write(fn)
        self._notify()
        for pool, idx, cluster, status in rows:
            p = await self.get(str(pool))
            if status == "TERMINATING" and p is not None and p["status"] == "READY":
                self.spawn(f"pool-rm-{cluster}", self._remove,
                           {"pool": pool, "idx": idx, "cluster": cluster}, lambda _: None)
