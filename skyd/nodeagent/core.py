"""The node agent's state: queue, executor, capacity, job drivers, activity and autostop.
Python 3.8 compatible."""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import ssl
import time
from pathlib import Path
from typing import Any

from . import gang
from . import jobqueue as jq
from .executor import Executor
from .gpu import Gpu
from .scheduler import Capacity, plan_admissions
from .spec import validate_spec

log = logging.getLogger("skyd.nodeagent")


class SpecError(ValueError):
    pass


#: a worker ends a rank whose head has not asked about it for this long, and the head gives
#: up on a worker it cannot reach for this long (it polls every rank at least every third
#: of it, at most every 10 s, while it drives the job); SKYD_RANK_LEASE_S or --rank-lease
RANK_LEASE_S = 30.0


def rank_lease_from_env() -> float:
    """SKYD_RANK_LEASE_S (seconds, > 0), else RANK_LEASE_S."""
    raw = os.environ.get("SKYD_RANK_LEASE_S") or ""
    try:
        v = float(raw or RANK_LEASE_S)
    except ValueError:
        v = 0.0
    if v > 0:
        return v
    log.warning("SKYD_RANK_LEASE_S=%r is not a number of seconds > 0; using %.0f",
                raw, RANK_LEASE_S)  # fmt: skip
    return RANK_LEASE_S


class Agent:
    def __init__(self, home: Path, *, rank: int, cluster: str, peer_ssl: ssl.SSLContext | None,
                 gpus: list[Gpu], cpus: float, memory_gb: float,
                 autostop_action: str) -> None:  # fmt: skip
        # peer_ssl: how the head reaches its workers (mutual TLS, see auth.py)
        self.home, self.rank, self.cluster, self.peer_ssl = home, rank, cluster, peer_ssl
        self.gpus, self.memory_gb, self.autostop_action = gpus, memory_gb, autostop_action
        self.vendor = gpus[0].vendor if gpus else ""
        self.capacity = Capacity(cpus, [g.index for g in gpus])
        self.queue = jq.JobQueue(home / "jobs.db")
        # The life pipe: only this process holds the write end, so its read end sees EOF
        # the moment the agent is gone (see executor.GANG_WRAPPER).
        self.life_r, self.life_w = os.pipe()
        self.ex = Executor(home, self.queue, self.vendor, cluster, life_fd=self.life_r)
        # worker side: when the head last asked about each job's rank (see reap_orphans)
        self.rank_lease_s = rank_lease_from_env()
        self.head_seen: dict[int, float] = {}
        self.head_asking: dict[int, int] = {}  # the head's long polls in flight, per job
        self.reaping: set[int] = set()
        self.drivers: dict[int, asyncio.Task] = {}  # type: ignore[type-arg]
        self.cancelling: set[int] = set()  # jobs being cancelled: no new driver for them
        self.started_at = time.time()
        self.last_activity = time.time()
        self.wake = asyncio.Event()
        self.exit_requested = asyncio.Event()
        self.queue.set_meta("stopped", False)

    # ---- activity / autostop ----------------------------------------------------------
    def touch(self) -> None:
        self.last_activity = time.time()

    @property
    def autostop(self) -> dict[str, Any]:
        return dict(self.queue.meta("autostop", {"idle_minutes": -1.0, "down": False}))

    def set_autostop(self, idle_minutes: float, down: bool) -> None:
        self.queue.set_meta("autostop", {"idle_minutes": float(idle_minutes), "down": bool(down)})
        self.touch()
        self.wake.set()  # a quiet event loop recomputes when autostop is due

    def counts(self) -> dict[str, int]:
        active = self.queue.with_status([jq.PENDING, jq.SETTING_UP, jq.RUNNING, jq.INIT])
        running = sum(1 for j in active if j["status"] in jq.ACTIVE)
        return {"running": running, "pending": len(active) - running}

    def is_idle(self) -> bool:
        """No job running or waiting: the only state in which autostop may fire."""
        c = self.counts()
        return not (c["running"] or c["pending"])

    def is_quiet(self) -> bool:
        """Idle, and no job driver, cancellation or worker rank left: nothing for the event
        loop to do until a wake, the heartbeat or autostop."""
        return (self.is_idle() and not self.drivers and not self.cancelling
                and not self.queue.running_ranks())  # fmt: skip

    def idle_seconds(self) -> float:
        c = self.counts()
        if c["running"] or c["pending"]:
            return 0.0
        return max(0.0, time.time() - self.last_activity)

    # ---- jobs -------------------------------------------------------------------------
    def submit(self, spec: dict[str, Any]) -> int:
        err = validate_spec(spec)
        if err:
            raise SpecError(err)
        if not self.capacity.fits_ever(spec["cpus"], spec["gpus"]):
            raise SpecError(
                "job needs cpus=%g gpus=%d per node but this node has cpus=%g gpus=%d; "
                "lower the demand or use a bigger node"
                % (spec["cpus"], spec["gpus"], self.capacity.cpus, len(self.capacity.gpu_indices))
            )
        spec = dict(spec)
        secrets = spec.pop("secrets", None) or {}  # to a 0600 file by the job, not jobs.db
        job_id = self.queue.add(spec, self.cluster,
                                before_commit=lambda jid: self.ex.save_secrets(jid, secrets))
        self.touch()
        self.wake.set()
        return job_id

    def log_path(self, job_id: int) -> Path:
        return self.ex.log_path(job_id, 0)

    def schedule(self) -> None:
        """Admit pending jobs that fit (persisted as SETTING_UP with their GPU slots), and
        give every admitted job a driver again if its driver died (e.g. its state write
        failed on a full disk): the new driver adopts the job's processes."""
        for job in self.queue.with_status(jq.ACTIVE):
            if job["job_id"] not in self.drivers and job["job_id"] not in self.cancelling:
                self._spawn_driver(job)
        pending = self.queue.with_status([jq.PENDING])
        if not pending:
            return
        active = self.queue.with_status(jq.ACTIVE)
        for job_id, slots in plan_admissions(pending, active, self.capacity):
            job = self.queue.set_status(job_id, jq.SETTING_UP, gpu_slots=slots)
            self._spawn_driver(job)

    def _spawn_driver(self, job: dict[str, Any]) -> None:
        ranks = gang.make_ranks(self.ex, job, self.peer_ssl, self.rank_lease_s)
        task = asyncio.ensure_future(gang.drive(self.queue, job["job_id"], ranks))
        self.drivers[job["job_id"]] = task

        def _done(t: asyncio.Future) -> None:  # type: ignore[type-arg]
            self.drivers.pop(job["job_id"], None)
            if not t.cancelled() and t.exception() is not None:
                self._driver_crashed(job["job_id"], t.exception())
            self._drop_secrets_if_done(job["job_id"])
            self.touch()
            self.wake.set()

        task.add_done_callback(_done)

    def _driver_crashed(self, job_id: int, exc: BaseException | None) -> None:
        if isinstance(exc, (sqlite3.Error, OSError)):
            # Storage (disk full, I/O error): the job itself may be fine. Its next driver
            # (schedule(), every tick) adopts it once writes succeed again.
            log.warning("driver of job %d: %r; retrying", job_id, exc)
            return
        try:
            job = self.queue.get(job_id)
            if job and job["status"] not in jq.TERMINAL:
                self.queue.set_status(job_id, jq.FAILED_DRIVER, reason=f"driver error: {exc!r}")
        except (sqlite3.Error, OSError) as e:
            log.warning("job %d: cannot record the driver error (%r)", job_id, e)

    def _drop_secrets_if_done(self, job_id: int) -> None:
        current = self.queue.get(job_id)
        if current is None or current["status"] in jq.TERMINAL:
            self.ex.drop_secrets(job_id)

    def recover(self) -> None:
        """After a restart: resume drivers of admitted jobs (adopting live processes)."""
        for p in (self.home / "jobs").glob("*/secrets.json"):
            if p.parent.name.isdigit():  # the agent died before deleting a finished job's
                self._drop_secrets_if_done(int(p.parent.name))
        for job in self.queue.with_status(jq.ACTIVE):
            self._spawn_driver(job)
        for job in self.queue.with_status([jq.INIT]):
            self.queue.set_status(job["job_id"], jq.PENDING)

    async def cancel(self, job_ids: list[int] | None) -> list[int]:
        """Cancel (None = all non-terminal). Returns once the processes are gone."""
        self.touch()
        jobs = self.queue.with_status([jq.INIT, jq.PENDING, jq.SETTING_UP, jq.RUNNING])
        if job_ids is not None:
            wanted = set(job_ids)
            jobs = [j for j in jobs if j["job_id"] in wanted]
        await asyncio.gather(*(self._cancel_one(j) for j in jobs))
        return [j["job_id"] for j in jobs]

    async def _cancel_one(self, job: dict[str, Any]) -> None:
        job_id = job["job_id"]
        self.cancelling.add(job_id)
        try:
            await self._cancel_locked(job)
        finally:
            self.cancelling.discard(job_id)

    async def _cancel_locked(self, job: dict[str, Any]) -> None:
        job_id = job["job_id"]
        task = self.drivers.pop(job_id, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if job["status"] in jq.ACTIVE:
            ranks = gang.make_ranks(self.ex, job, self.peer_ssl, self.rank_lease_s)
            await asyncio.gather(*(r.kill() for r in ranks))
            for r in ranks:
                if isinstance(r, gang.RemoteRank):
                    r.close()
        current = self.queue.get(job_id)
        if current and current["status"] not in jq.TERMINAL:
            self.queue.set_status(job_id, jq.CANCELLED, reason="cancelled")
        self.ex.drop_secrets(job_id)

    # ---- worker side of gang scheduling ----------------------------------------------
    def start_rank(self, job_id: int, rank: int, phase: str, spec: dict[str, Any]) -> None:
        self.touch()
        existing = [r for r in self.queue.ranks_of(job_id, rank) if r["gpu_slots"]]
        if existing:
            slots = existing[0]["gpu_slots"]
        else:
            used = set(self.ex.running_slots(job_id))
            free = [i for i in self.capacity.gpu_indices if i not in used]
            if len(free) < spec["gpus"]:
                raise SpecError("rank %d needs %d GPUs, %d free" % (rank, spec["gpus"], len(free)))
            slots = free[: spec["gpus"]]
        self.ex.start(job_id, rank, phase, spec, slots)

    def head_contact(self, job_id: int) -> None:
        """Worker side: the head asked about (started, polled) this job's rank."""
        self.head_seen[job_id] = time.monotonic()

    def reap_orphans(self) -> None:
        """Worker side: end ranks whose head stopped asking about them (its agent died: the
        job cannot go on, and nothing else would end them)."""
        if self.rank == 0:
            return
        now = time.monotonic()
        for row in self.queue.running_ranks():
            job_id = row["job_id"]
            if job_id in self.reaping or self.head_asking.get(job_id):
                continue  # being ended, or the head is waiting on it right now
            seen = self.head_seen.setdefault(job_id, now)  # a restarted worker: from now
            if now - seen > self.rank_lease_s:
                log.warning("job %d: the head has not asked about rank %d for %.0f s; ending it",
                            job_id, row["rank"], now - seen)  # fmt: skip
                self.reaping.add(job_id)
                asyncio.ensure_future(self._reap(job_id, row["rank"]))

    async def _reap(self, job_id: int, rank: int) -> None:
        try:
            await self.kill_rank(job_id, rank)
        finally:
            self.reaping.discard(job_id)

    async def kill_rank(self, job_id: int, rank: int) -> None:
        await self.ex.kill(job_id, rank)
        if self.queue.rank(job_id, rank, "final") is None:
            self.queue.put_rank(job_id, rank, "final", state="done", exit_code=0)

    def rank_finished(self, job_id: int, rank: int) -> bool:
        """Worker-side: true once the head ended this rank or its run phase ended."""
        for r in self.queue.ranks_of(job_id, rank):
            if r["phase"] == "final" or r["state"] == "killed":
                return True
            if r["phase"] == "run" and r["state"] in ("done", "lost"):
                return True
            if r["phase"] == "setup" and r["state"] == "lost":
                return True
        return False

    # ---- stop -------------------------------------------------------------------------
    async def stop_node(self, down: bool) -> None:
        """Autostop on the local infra: persist `stopped`, kill jobs, then exit."""
        self.queue.set_meta("stopped", True)
        self.queue.set_meta("stopped_down", bool(down))
        await self.cancel(None)
        tmp = self.home / "stopped.json.tmp"
        tmp.write_text(
            '{{"stopped_at": {:f}, "down": {}}}'.format(time.time(), "true" if down else "false")
        )
        os.replace(str(tmp), str(self.home / "stopped.json"))
        self.exit_requested.set()
