"""One managed job's controller: an async task driving the upper state machine.

PENDING → STARTING → RUNNING → (RECOVERING → RUNNING)* → SUCCEEDED | CANCELLING → CANCELLED |
FAILED | FAILED_SETUP | FAILED_PRECHECKS | FAILED_NO_RESOURCE | FAILED_CONTROLLER.

Crash safety rests on three rules: (1) every transition is one committed transaction before
anything acts on it; (2) the intended cluster name and an attempt row in LAUNCHING are
persisted before a launch starts, so a restarted controller that finds a LAUNCHING attempt
tears that cluster down and starts a new attempt (never re-using an attempt number); (3) the
`cluster` column stays set until teardown is confirmed, so a terminal row with a cluster is
"teardown pending" and resume finishes it.
"""

from __future__ import annotations

import logging
import math
import random
import time
import traceback
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skyd.errors import ResourcesUnavailableError
from skyd.jobs import job_secrets
from skyd.jobs import status as st
from skyd.jobs import strategies as strat
from skyd.jobs.logfile import CONTROLLER_LOG
from skyd.jobs.ops import Block, JobInfo, LaunchResult, PrecheckError
from skyd.jobs.spec import load_dag, task_spec

if TYPE_CHECKING:
    from skyd.jobs.manager import JobsManager

logger = logging.getLogger("skyd.jobs")
S = st.ManagedJobStatus


@dataclass
class JobsConfig:
    poll_interval: float = 5.0  # seconds between job-status checks of a running job
    max_concurrent_launches: int | None = None  # None: 4 x CPUs
    backoff_initial: float = 10.0  # between whole launch rounds, doubling
    backoff_max: float = 300.0
    recovery_rounds: int = 3  # rounds per recovery without retry-until-up
    user_failure_grace: float = 5.0  # wait before trusting a user-failure (preemption races)
    unreachable_grace: int = 3  # polls with the agent silent but the cluster UP → recover
    teardown_tries: int = 5
    cluster_prefix: str = "skyd-jobs"
    log_dir: Path | None = None  # controller logs: <log_dir>/<job_id>.log


class _Cancelled(Exception):
    """The row is no longer active (a cancel moved it to CANCELLING)."""


def cluster_name(prefix: str, job_id: int, task_index: int) -> str:
    return f"{prefix}-{job_id}-{task_index}"


def _tag(reason: str | None) -> str:
    return (reason or "").split(":", 1)[0]


class JobController:
    def __init__(self, manager: JobsManager, job_id: int) -> None:
        self.m = manager
        self.db = manager.db
        self.ops = manager.ops
        self.cfg = manager.config
        self.job_id = job_id
        self.scope: anyio.CancelScope | None = None
        self.cancel_pending = False
        self.done = anyio.Event()
        self.status = ""
        self.restarts = 0
        self.row: dict[str, Any] = {}

    # -- plumbing -------------------------------------------------------------------------

    def log(self, text: str) -> None:
        line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} job {self.job_id}: {text}"
        logger.debug(line)
        if self.cfg.log_dir is not None:  # written by a background thread, not on the loop
            CONTROLLER_LOG.append(self.cfg.log_dir / f"{self.job_id}.log", line + "\n")

    def cancel(self) -> None:
        self.cancel_pending = True
        if self.scope is not None:
            self.scope.cancel()

    async def _update(self, fields: dict[str, Any], **kw: Any) -> None:
        if not await self.db.update_job(self.job_id, fields, **kw):
            raise _Cancelled()
        if "status" in fields:
            self.status = fields["status"]
            self.log(f"-> {self.status}")

    async def _teardown(self, cluster: str) -> None:
        if await self.m.pools.is_worker(cluster):  # a pool's worker stays: hand it back
            await self.m.pools.release(self.job_id)
            return
        delay = max(0.01, min(self.cfg.backoff_initial, 5.0))
        for i in range(self.cfg.teardown_tries):
            try:
                await self.ops.teardown(cluster)
                return
            except Exception as e:  # noqa: BLE001
                self.log(f"teardown of {cluster} failed ({e!r}); try {i + 1}")
                if i + 1 == self.cfg.teardown_tries:
                    raise
                await anyio.sleep(delay)
                delay *= 2

    async def _clear_cluster(self) -> None:
        await self.db.update_job(
            self.job_id, {"cluster": None, "cluster_job_id": None}, only_active=False
        )

    # -- top level ------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._run_scoped()
        except anyio.get_cancelled_exc_class() as e:
            if self.m.stopping or _outer_cancelled():
                raise  # the daemon (or whoever runs us) is stopping: leave the row for resume
            # A cancellation our scope could not absorb (a native Task.cancel() from a
            # library): this job ends here; re-raised, it would end the daemon.
            await self._fail_controller(e, also=[S.CANCELLING.value])
        finally:
            self.m._forget(self.job_id, self)
            self.done.set()

    async def _run_scoped(self) -> None:
        with anyio.CancelScope() as scope:
            self.scope = scope
            if self.cancel_pending:
                scope.cancel()
            try:
                await self._drive()
            except _Cancelled:
                pass
            except Exception as e:
                if self.m.stopping:
                    return
                await self._fail_controller(e)
        if self.m.stopping:  # daemon shutdown: leave the row as it is for resume
            return
        # Cancelled by us, or done: finish what the row says is left.
        try:
            row = await self.db.get_job(self.job_id)
            if row is not None and row["status"] == S.CANCELLING:
                await self._finish_cancel(row)
            elif row is not None and row["status"] in st.TERMINAL and row["cluster"]:
                await self._teardown(row["cluster"])
                await self._clear_cluster()
            await job_secrets.forget_if_terminal(self.db, self.job_id)
            if row is not None and row["status"] in st.TERMINAL:
                await self.m.pools.release(self.job_id)  # a claim made just before a cancel
        except Exception as e:
            if self.m.stopping:
                raise
            await self._fail_controller(e, also=[S.CANCELLING.value])

    async def _fail_controller(self, e: BaseException, also: Sequence[str] = ()) -> None:
        """End the job FAILED_CONTROLLER (the daemon log has the traceback). A cancellation
        none of our scopes asked for counts as an error too: re-raised, it would end the
        daemon's root task group. The cluster column stays: resume retries the teardown."""
        logger.error("managed job %s: controller error:\n%s", self.job_id,
                     "".join(traceback.format_exception(e)))
        self.log(f"controller error: {e!r}")
        with anyio.CancelScope(shield=True):
            await self.db.update_job(
                self.job_id,
                {"status": S.FAILED_CONTROLLER.value, "schedule_state": "DONE",
                 "ended_at": time.time(), "failure_reason": f"controller error: {e!r}"},
                only_status=[*st.ACTIVE, *also],
            )  # fmt: skip

    async def _finish_cancel(self, row: dict[str, Any]) -> None:
        cluster, cjob = row["cluster"], row["cluster_job_id"]
        if cluster:
            if cjob is not None:
                try:
                    with anyio.fail_after(30):
                        await self.ops.cancel_job(cluster, int(cjob))
                except Exception as e:  # noqa: BLE001 - teardown follows anyway
                    self.log(f"cancel of job {cjob} on {cluster}: {e!r}")
            await self._teardown(cluster)
        att = await self.db.last_attempt(self.job_id, int(row["current_task"]))
        upd = None
        if att is not None and att["ended_at"] is None:
            upd = (att["task_index"], att["attempt"],
                   {"status": "CANCELLED", "ended_at": time.time(), "reason": "cancelled"})  # fmt: skip
        await self.db.update_job(
            self.job_id,
            {"status": S.CANCELLED.value, "schedule_state": "DONE", "ended_at": time.time(),
             "cluster": None, "cluster_job_id": None},
            only_status=[S.CANCELLING.value], attempt_update=upd,
        )  # fmt: skip
        self.log("-> CANCELLED")

    async def _drive(self) -> None:
        row = await self.db.get_job(self.job_id)
        if row is None or row["status"] not in st.ACTIVE:
            return
        self.row, self.status, self.restarts = row, row["status"], int(row["restarts"])
        dag = load_dag(row)
        n = len(dag["tasks"])
        ti = int(row["current_task"])
        while True:
            if not await self._run_task(dag, ti):
                return
            if ti + 1 >= n:
                await self._update(
                    {"status": S.SUCCEEDED.value, "schedule_state": "DONE", "exit_code": 0,
                     "ended_at": time.time(), "cluster": None, "cluster_job_id": None}
                )  # fmt: skip
                return
            ti += 1
            await self._update(
                {"current_task": ti, "status": S.PENDING.value, "schedule_state": "WAITING",
                 "cluster": None, "cluster_job_id": None}
            )  # fmt: skip
            self.row["current_task"] = ti

    # -- one task -------------------------------------------------------------------------

    async def _run_task(self, dag: dict[str, Any], ti: int) -> bool:
        """Run task `ti` to the end. True: it succeeded (cluster torn down). False: the job
        reached a terminal state (already persisted)."""
        cluster = cluster_name(self.cfg.cluster_prefix, self.job_id, ti)
        if dag.get("pool"):  # runs on a free worker of the pool (PENDING until one is)
            cluster = await self.m.pools.acquire(str(dag["pool"]), self.job_id)
            self.log(f"task {ti}: on pool {dag['pool']} worker {cluster}")
        att = await self.db.last_attempt(self.job_id, ti)
        reason: str | None = None
        last: Block | None = None
        need_launch = True
        if att is not None:
            last = _loc(att)
            if att["ended_at"] is None and att["status"] == st.ATTEMPT_LAUNCHING:
                # Died mid-launch: whatever was half-created goes; a fresh attempt follows.
                self.log(f"attempt {att['attempt']} was interrupted mid-launch; tearing down")
                if not dag.get("pool"):  # a pool worker stays, and this job keeps its claim
                    await self._teardown(cluster)
                await self._update(
                    {"cluster_job_id": None},
                    attempt_update=(ti, att["attempt"], {
                        "status": st.ATTEMPT_INTERRUPTED, "ended_at": time.time(),
                        "reason": f"{strat.INTERRUPTED}: controller restarted during launch"}),
                )  # fmt: skip
                prev = await self._previous_location(ti, att["attempt"])
                reason, last = (strat.INTERRUPTED, prev) if prev else (None, None)
            elif att["ended_at"] is None:
                need_launch = False  # re-attach to the running job
            elif att["status"] == "SUCCEEDED":
                await self._teardown(cluster)
                return True
            else:  # ended, decision (recover) already persisted with it
                reason = _tag(att["reason"]) or strat.PREEMPTED
        while True:
            if need_launch:
                att = await self._launch(dag, ti, cluster, att, reason, last)
                if att is None:
                    return False
            assert att is not None
            kind, info, why = await self._monitor(cluster, att)
            last = _loc(att)
            now = time.time()
            aid = (ti, int(att["attempt"]))
            code = info.exit_code if info else None
            lower = info.status if info else st.ATTEMPT_PREEMPTED
            if kind == "succeeded":
                await self._update({}, attempt_update=(*aid, {
                    "status": "SUCCEEDED", "ended_at": now, "exit_code": code or 0, "reason": "succeeded"}))  # fmt: skip
                await self._teardown(cluster)
                return True
            rec = self._recovery(dag, ti)
            if kind == "preempted":
                reason, inc, status = strat.PREEMPTED, "recoveries", st.ATTEMPT_PREEMPTED
            elif kind == "failed" and code is not None and code in rec[1]:
                reason, inc, status = strat.EXIT_CODE, "recoveries", lower
                why = f"exit code {code} is in recover_on_exit_codes"
            elif kind == "failed" and self.restarts < rec[0]:
                reason, inc, status = strat.RESTART, "restarts", lower
                why = f"{why}; restart {self.restarts + 1}/{rec[0]}"
            else:
                final = {"failed": S.FAILED_SETUP if lower == "FAILED_SETUP" else S.FAILED,
                         "cancelled": S.CANCELLED}[kind]  # fmt: skip
                await self._update(
                    {"status": final.value, "schedule_state": "DONE", "ended_at": now,
                     "failure_reason": None if kind == "cancelled" else why, "exit_code": code},
                    attempt_update=(*aid, {"status": lower, "ended_at": now, "exit_code": code,
                                           "reason": why}),
                )  # fmt: skip
                await self._teardown(cluster)
                await self._clear_cluster()
                return False
            await self._update(
                {"status": S.RECOVERING.value, "schedule_state": "WAITING", "cluster_job_id": None},
                increment=[inc],
                attempt_update=(*aid, {"status": status, "ended_at": now, "exit_code": code,
                                       "reason": f"{reason}: {why}"}),
            )  # fmt: skip
            if inc == "restarts":
                self.restarts += 1
            need_launch = True

    def _recovery(self, dag: dict[str, Any], ti: int) -> tuple[int, tuple[int, ...]]:
        rec = dag["tasks"][ti].get("recovery") or {}
        codes = tuple(int(c) for c in rec.get("recover_on_exit_codes") or ())
        return int(rec.get("max_restarts_on_errors") or 0), codes

    async def _previous_location(self, ti: int, before: int) -> Block | None:
        for a in reversed(await self.db.attempts(self.job_id)):
            if a["task_index"] == ti and a["attempt"] < before and a["cloud"]:
                return _loc(a)
        return None

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        async with self.m.scheduler.slot(
            self.job_id, int(self.row["priority"]), float(self.row["submitted_at"])
        ):
            status = S.STARTING if self.status in (S.PENDING, S.STARTING) else S.RECOVERING
            await self._update({"schedule_state": "LAUNCHING", "status": status.value})
            yield

    async def _backoff(self, delay: float) -> None:
        await self._update({"schedule_state": "WAITING"})

    async def _launch(
        self,
        dag: dict[str, Any],
        ti: int,
        cluster: str,
        prev: dict[str, Any] | None,
        reason: str | None,
        last: Block | None,
    ) -> dict[str, Any] | None:
        attempt = int(prev["attempt"]) + 1 if prev else 1
        spec = task_spec(self.row, dag, ti, attempt)
        now = time.time()
        # Rule 2: the intended cluster is on disk before anything is created.
        await self._update(
            {"cluster": cluster, "cluster_job_id": None},
            attempt_insert={"job_id": self.job_id, "task_index": ti, "attempt": attempt,
                            "cluster": cluster, "status": st.ATTEMPT_LAUNCHING, "started_at": now},
        )  # fmt: skip
        env = strat.StrategyEnv(
            ops=self.ops, log=self.log, slot=self._slot,
            retry_until_up=bool(self.row["retry_until_up"]),
            backoff_initial=self.cfg.backoff_initial, backoff_max=self.cfg.backoff_max,
            recovery_rounds=self.cfg.recovery_rounds, on_backoff=self._backoff,
        )  # fmt: skip
        strategy = strat.get_strategy(spec.recovery.strategy or self.row["strategy"])(env)
        self.log(f"task {ti} attempt {attempt}: launching {cluster} ({reason or 'first launch'})")
        try:
            if reason is None or last is None:
                res: LaunchResult = await strategy.launch(spec, cluster)
            else:
                res = await strategy.recover(spec, cluster, last, reason)
        except (PrecheckError, ResourcesUnavailableError, strat.LaunchError) as e:
            if isinstance(e, PrecheckError):
                final = S.FAILED_PRECHECKS
            elif isinstance(e, strat.LaunchError):
                final = S.FAILED_CONTROLLER
            else:
                final = S.FAILED_NO_RESOURCE
            reason = f"controller error: {e}" if final == S.FAILED_CONTROLLER else str(e)
            t = time.time()
            await self._update(
                {"status": final.value, "schedule_state": "DONE", "ended_at": t,
                 "failure_reason": reason},
                attempt_update=(ti, attempt, {"status": st.ATTEMPT_LAUNCH_FAILED, "ended_at": t,
                                              "reason": str(e)}),
            )  # fmt: skip
            await self._teardown(cluster)
            await self._clear_cluster()
            return None
        fields: dict[str, Any] = {
            "status": S.RUNNING.value, "schedule_state": "ALIVE", "cluster_job_id": res.job_id,
            "last_cloud": res.cloud, "last_region": res.region, "last_zone": res.zone,
        }  # fmt: skip
        if not self.row.get("started_at"):
            fields["started_at"] = self.row["started_at"] = time.time()
        afields = {"cluster_job_id": res.job_id, "cloud": res.cloud, "region": res.region,
                   "zone": res.zone, "status": "PENDING"}  # fmt: skip
        await self._update(fields, attempt_update=(ti, attempt, afields))
        self.log(f"task {ti} attempt {attempt}: job {res.job_id} on {res.cloud}/{res.region}/{res.zone}")
        return {"attempt": attempt, "task_index": ti, **afields}

    async def _monitor(self, cluster: str, att: dict[str, Any]) -> tuple[str, JobInfo | None, str]:
        """Watch the attempt's job until it leaves the active lower states. Returns (kind,
        last job info, why) with kind in succeeded | failed | preempted | cancelled."""
        job_id = int(att["cluster_job_id"])
        lower = att.get("status")
        silent = 0
        poll = self.cfg.poll_interval
        while True:
            try:
                info = await self.ops.job_status(cluster, job_id)
            except Exception as e:  # noqa: BLE001 - treated as an unreachable agent
                self.log(f"job status: {e!r}")
                info = None
            if info is not None and info.status in st.LOWER_ACTIVE:
                silent = 0
                if info.status != lower:
                    lower = info.status
                    await self._update({}, attempt_update=(
                        int(att["task_index"]), int(att["attempt"]), {"status": lower}))  # fmt: skip
                await anyio.sleep(poll * random.uniform(0.8, 1.2))
                continue
            if info is not None and info.status == "SUCCEEDED":
                return "succeeded", info, "succeeded"
            if info is not None and info.status == "CANCELLED":
                return "cancelled", info, "job cancelled on the cluster"
            cs = await self._cluster_status(cluster)
            if cs not in ("UP", "UNKNOWN"):
                return "preempted", info, f"cluster {cs}" + (
                    f", job {info.status}" if info else ", agent unreachable")  # fmt: skip
            if info is None or info.status == "FAILED_DRIVER" or cs == "UNKNOWN":
                silent += 1
                if silent >= self.cfg.unreachable_grace:
                    return "preempted", info, "agent unreachable while the cluster is UP"
                await anyio.sleep(poll)
                continue
            if self.cfg.user_failure_grace > 0:  # a preemption may kill the job first
                await anyio.sleep(self.cfg.user_failure_grace)
                cs = await self._cluster_status(cluster)
                if cs not in ("UP", "UNKNOWN"):
                    return "preempted", info, f"cluster {cs}, job {info.status}"
            why = f"{info.status} with exit code {info.exit_code}"
            return "failed", info, why

    async def _cluster_status(self, cluster: str) -> str:
        try:
            return await self.ops.cluster_status(cluster)
        except Exception as e:  # noqa: BLE001 - the provider did not answer
            self.log(f"cluster status: {e!r}")
            return "UNKNOWN"


def _loc(att: dict[str, Any]) -> Block | None:
    if not att.get("cloud"):
        return None
    return Block(att["cloud"], att.get("region"), att.get("zone"))


def _outer_cancelled() -> bool:
    """Whether a scope around this task was cancelled (a real stop), as opposed to a stray
    native cancellation that no scope asked for: a cancelled scope makes the effective
    deadline -inf."""
    return anyio.current_effective_deadline() == -math.inf
