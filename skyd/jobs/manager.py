"""The managed-jobs service inside the daemon: submit, cancel, resume after a restart.

Each job is one `JobController` task spawned into the daemon's root task group via the
`spawn(name, async_fn, *args)` callable the daemon gives us. All state is in `JobsDB`, so
`resume_all` at daemon start picks every unfinished job (and every unconfirmed teardown) up.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from skyd.daemon.owners import acting_as
from skyd.errors import InvalidSpecError, NotFoundError
from skyd.jobs import status as st
from skyd.jobs.controller import JobController, JobsConfig
from skyd.jobs.ops import ClusterOps
from skyd.jobs.pools import PoolManager
from skyd.jobs.scheduler import LaunchScheduler
from skyd.jobs.spec import build_dag, dag_strategy
from skyd.jobs.state import JobsDB
from skyd.jobs.strategies import get_strategy

Spawn = Callable[..., Any]  # spawn(name, async_fn, *args)

_current: list[JobsManager] = []


class JobsManager:
    def __init__(
        self, db: JobsDB, ops: ClusterOps, spawn: Spawn, config: JobsConfig | None = None
    ) -> None:
        self.db = db
        self.ops = ops
        self.spawn = spawn
        self.config = config or JobsConfig()
        self.scheduler = LaunchScheduler(self.config.max_concurrent_launches)
        self._controllers: dict[int, JobController] = {}
        self.pools = PoolManager(db, ops, spawn)
        self.stopping = False

    # -- controllers ----------------------------------------------------------------------

    def _start(self, job_id: int, user: str | None = None) -> JobController:
        """The job's controller (started when none runs): it acts as ``user``, the job's
        submitter, whoever asked (an admin's cancel, a restarted daemon)."""
        ctrl = self._controllers.get(job_id)
        if ctrl is None:
            ctrl = JobController(self, job_id)
            self._controllers[job_id] = ctrl
            with acting_as(user):  # its clusters stay its submitter's
                self.spawn(f"managed-job-{job_id}", ctrl.run)
        return ctrl

    def _forget(self, job_id: int, ctrl: JobController) -> None:
        if self._controllers.get(job_id) is ctrl:
            del self._controllers[job_id]

    async def stop(self, timeout: float = 10.0) -> None:
        """Daemon shutdown: interrupt every controller without touching its row (the next
        daemon resumes it), then close the database."""
        import anyio

        self.stopping = True
        ctrls = list(self._controllers.values())
        for c in ctrls:
            c.cancel()
        with anyio.move_on_after(timeout):
            for c in ctrls:
                await c.done.wait()
        await self.db.close()

    @property
    def live(self) -> int:
        return len(self._controllers)

    async def wait(self, job_id: int) -> str:
        """Wait for the job's controller to finish; return the persisted status."""
        ctrl = self._controllers.get(job_id)
        if ctrl is not None:
            await ctrl.done.wait()
        row = await self.db.get_job(job_id)
        if row is None:
            raise NotFoundError(f"no managed job {job_id}")
        return str(row["status"])

    # -- verbs ----------------------------------------------------------------------------

    async def submit(
        self,
        docs: list[dict[str, Any]],
        *,
        name: str | None = None,
        envs: dict[str, str] | None = None,
        job_recovery: str | None = None,
        priority: int = 0,
        retry_until_up: bool = False,
        secrets_ref: str | None = None,
        catalog_dir: str | None = None,
        request_key: str | None = None,
        pool: str | None = None,
    ) -> int:
        """Create the job row (PENDING/WAITING) and spawn its controller (once per
        `request_key`, see JobsDB.create_job). ``secrets_ref`` names the job's secrets file
        (skyd.jobs.job_secrets)."""
        dag_name, dag = build_dag(docs, envs=envs, override=job_recovery)
        if secrets_ref:
            dag["secrets_ref"] = secrets_ref
        if catalog_dir:  # the submitter's SKYD_CATALOG_DIR: every recovery plans with it
            dag["catalog_dir"] = catalog_dir
        if pool:
            await self.pools.require(pool)
            dag["pool"] = pool
        strategy = dag_strategy(dag)
        get_strategy(strategy)  # unknown names fail here, before a row exists
        for t in dag["tasks"]:
            if t["recovery"]["strategy"]:
                get_strategy(t["recovery"]["strategy"])
        if not -1000 <= priority <= 1000:
            raise InvalidSpecError("priority must be within -1000..1000", field="priority")
        job_id = await self.db.create_job(
            name=name or dag_name, dag_json=json.dumps(dag), strategy=strategy,
            priority=priority, retry_until_up=retry_until_up, request_key=request_key,
        )  # fmt: skip
        self._start(job_id)
        return job_id

    async def cancel(
        self, *, ids: list[int] | None = None, name: str | None = None, all_jobs: bool = False
    ) -> list[int]:
        """Move matching active jobs to CANCELLING and interrupt their controllers (which
        cancel the job, tear the cluster down, and end CANCELLED). Returns the ids moved."""
        if not ids and name is None and not all_jobs:
            raise InvalidSpecError("say which jobs to cancel", hint="give job ids, -n NAME or -a")
        rows = await self.db.list_jobs(skip_finished=True, ids=ids or None, name=name)
        if ids:
            known = {r["id"] for r in await self.db.list_jobs(ids=ids)}
            missing = sorted(set(ids) - known)
            if missing:
                raise NotFoundError(f"no managed job(s) {missing}", hint="see `skyd jobs queue`")
        moved = []
        for r in rows:
            if await self.db.request_cancel(int(r["id"])) is not None:
                moved.append(int(r["id"]))
                row = await self.db.get_job(int(r["id"])) or {}
                self._start(int(r["id"]), row.get("user")).cancel()
        return moved

    async def resume(self) -> int:
        """(Re)start a controller for every unfinished job and every pending teardown."""
        rows = await self.db.unfinished_or_dirty()
        for r in rows:
            self._start(int(r["id"]), r.get("user"))
        await self.pools.resume()
        return len(rows)

    async def queue(
        self, *, skip_finished: bool = False, statuses: list[str] | None = None
    ) -> list[dict[str, Any]]:
        bad = [s for s in statuses or [] if s.upper() not in st.ManagedJobStatus.__members__]
        if bad:
            raise InvalidSpecError(
                f"unknown status {bad[0]!r}", field="status",
                hint="one of " + ", ".join(st.ManagedJobStatus.__members__),
            )  # fmt: skip
        return await self.db.list_jobs(skip_finished=skip_finished, statuses=statuses)


async def resume_all(
    db: JobsDB, ops: ClusterOps, spawn: Spawn, config: JobsConfig | None = None
) -> JobsManager:
    """Daemon start: build the manager, resume every unfinished job, make it current."""
    m = JobsManager(db, ops, spawn, config)
    await m.resume()
    _current[:] = [m]
    return m


def current_manager() -> JobsManager:
    if not _current:
        raise RuntimeError("managed jobs are not started (resume_all not called)")
    return _current[0]


