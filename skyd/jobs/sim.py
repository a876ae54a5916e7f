"""SimClusterOps: an in-process simulation of clusters and jobs (no processes).

For tests and scale benchmarks. Clusters live in a dict; a job's lower status is computed
from the wall clock and its scripted outcome, so nothing runs in the background. Knobs:
preempt clusters, refuse capacity per cloud/region/zone, fail the next N provisioning tries,
and per-task scripts in the task dict::

    sim: {duration: 1.0, outcomes: [preempt, "exit:3", ok]}

The n-th launch on a cluster name plays outcomes[n], counting only launches whose outcome
was observed through job_status / cluster_status (the last one repeats): "ok" (SUCCEEDED), "exit:N" (FAILED with N), "setup_fail" (FAILED_SETUP),
"preempt" (the cluster is preempted half-way), "hang" (runs until cancelled). With `state_file` every mutation
is written atomically to JSON, so the simulated cloud survives a `kill -9` of its user.
Bookkeeping for tests: `launch_log`, `violations` (a launch on a cluster whose job is still
alive, or the same (cluster, attempt) launched twice), `teardowns`.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from skyd.errors import ResourcesUnavailableError
from skyd.jobs.ops import Block, JobInfo, LaunchResult, LogFn, PrecheckError, TaskSpec

NEVER = 1e18


@dataclass(slots=True)
class SimJob:
    id: int
    outcome: str
    started: float
    outcome_at: float
    cancelled: bool = False
    counted: bool = False


@dataclass(slots=True)
class SimCluster:
    name: str
    cloud: str
    region: str
    zone: str
    state: str = "INIT"  # INIT | UP
    preempted_at: float | None = None
    jobs: list[SimJob] = field(default_factory=list)


def default_locations() -> list[Block]:
    return [Block("fakecloud", f"r{r}", f"r{r}-{z}") for r in (1, 2, 3) for z in ("a", "b")]


class SimClusterOps:
    def __init__(
        self,
        *,
        locations: Sequence[Block] | None = None,
        launch_delay: float = 0.0,
        default_duration: float = 1.0,
        state_file: str | Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.locations = list(locations or default_locations())
        self.launch_delay = launch_delay
        self.default_duration = default_duration
        self.state_file = Path(state_file) if state_file else None
        self.clock = clock
        self.clusters: dict[str, SimCluster] = {}
        self.consumed: dict[str, int] = {}
        self.refused: list[Block] = []
        self.fail_provision = 0
        self.precheck_error: str | None = None
        self.next_job_id = 1
        self.launches = 0
        self.teardowns = 0
        self.launch_log: list[list[Any]] = []  # [cluster, attempt, cloud, region, zone, envs]
        self.violations: list[str] = []
        self._attempt_keys: set[tuple[str, int]] = set()
        if self.state_file and self.state_file.exists():
            self._load()

    # -- knobs ----------------------------------------------------------------------------

    def refuse_capacity(
        self, cloud: str | None = None, region: str | None = None, zone: str | None = None
    ) -> None:
        self.refused.append(Block(cloud, region, zone))
        self._save()

    def restore_capacity(self) -> None:
        self.refused.clear()
        self._save()

    def fail_next_provisions(self, n: int) -> None:
        self.fail_provision = n
        self._save()

    def preempt(self, names: Iterable[str]) -> list[str]:
        now = self.clock()
        hit = []
        for n in names:
            c = self.clusters.get(n)
            if c is not None and c.state == "UP" and not self._preempted(c, now):
                c.preempted_at = now
                hit.append(n)
        self._save()
        return hit

    def preempt_fraction(self, fraction: float, rng: random.Random) -> list[str]:
        now = self.clock()
        up = [c.name for c in self.clusters.values() if c.state == "UP" and not self._preempted(c, now)]
        return self.preempt(rng.sample(up, int(len(up) * fraction)))

    def live_clusters(self) -> list[str]:
        return sorted(self.clusters)

    # -- helpers --------------------------------------------------------------------------

    @staticmethod
    def _preempted(c: SimCluster, now: float) -> bool:
        return c.preempted_at is not None and now >= c.preempted_at

    def _count(self, c: SimCluster, j: SimJob) -> None:
        """An outcome is consumed once its user has *seen* it (so a job whose result nobody
        observed, e.g. the controller died mid-launch, replays the same outcome)."""
        if not j.counted:
            j.counted = True
            self.consumed[c.name] = self.consumed.get(c.name, 0) + 1
            self._save()

    def _job_state(self, j: SimJob, now: float) -> JobInfo:
        if j.cancelled:
            return JobInfo("CANCELLED", None)
        if now < j.outcome_at:
            return JobInfo("SETTING_UP" if j.outcome == "setup_fail" else "RUNNING")
        if j.outcome == "ok":
            return JobInfo("SUCCEEDED", 0)
        if j.outcome == "setup_fail":
            return JobInfo("FAILED_SETUP", 1)
        if j.outcome.startswith("exit:"):
            return JobInfo("FAILED", int(j.outcome.split(":", 1)[1]))
        return JobInfo("RUNNING")  # preempt: the cluster goes first

    def _candidates(self, spec: TaskSpec, blocked: Sequence[Block]) -> list[Block]:
        res = spec.task.get("resources") or {}
        res = res if isinstance(res, dict) else {}
        parts = [p for p in str(res.get("infra") or "").split("/") if p]
        want = Block(
            res.get("cloud") or (parts[0] if parts else None),
            res.get("region") or (parts[1] if len(parts) > 1 else None),
            res.get("zone") or (parts[2] if len(parts) > 2 else None),
        )
        out = []
        for loc in self.locations:
            if not want.matches(loc.cloud, loc.region, loc.zone):
                continue
            if spec.pin is not None and not spec.pin.matches(loc.cloud, loc.region, loc.zone):
                continue
            if any(b.matches(loc.cloud, loc.region, loc.zone) for b in blocked):
                continue
            out.append(loc)
        return out

    def _submit(self, c: SimCluster, spec: TaskSpec, now: float) -> SimJob:
        script = spec.task.get("sim") or {}
        outcomes = list(script.get("outcomes") or ["ok"])
        n = self.consumed.get(c.name, 0)
        outcome = str(outcomes[min(n, len(outcomes) - 1)])
        dur = float(script.get("duration", self.default_duration))
        at = now + (dur / 2 if outcome == "preempt" else dur)
        if outcome == "hang":
            at = NEVER
        j = SimJob(self.next_job_id, outcome, now, at)
        self.next_job_id += 1
        c.jobs.append(j)
        if outcome == "preempt":
            c.preempted_at = at
        return j

    # -- ClusterOps -----------------------------------------------------------------------

    async def launch(
        self, task: TaskSpec, cluster_name: str, *, blocked: Sequence[Block], log: LogFn
    ) -> LaunchResult:
        if self.precheck_error:
            raise PrecheckError(self.precheck_error)
        now = self.clock()
        key = (cluster_name, task.attempt)
        self.launches += 1
        c = self.clusters.get(cluster_name)
        if c is not None:
            alive = [j.id for j in c.jobs if self._job_state(j, now).status in
                     ("RUNNING", "SETTING_UP", "PENDING")]  # fmt: skip
            if c.state == "UP" and not self._preempted(c, now):
                if alive and not c.preempted_at:
                    self.violations.append(f"launch on {cluster_name} while job(s) {alive} alive")
                self._note_attempt(key, task, c)
                j = self._submit(c, task, now)
                self._save()
                return LaunchResult(j.id, c.cloud, c.region, c.zone)
            del self.clusters[cluster_name]  # stale remains: the provider cleans them
        plan = self._candidates(task, blocked)
        if not plan:
            raise ResourcesUnavailableError(f"no location left for {cluster_name} (all blocked)")
        for loc in plan:
            if any(b.matches(loc.cloud, loc.region, loc.zone) for b in self.refused):
                log(f"{loc.cloud}/{loc.region}/{loc.zone}: no capacity")
                continue
            if self.fail_provision > 0:
                self.fail_provision -= 1
                self._save()
                log(f"{loc.cloud}/{loc.region}/{loc.zone}: provisioning failed")
                continue
            assert loc.cloud and loc.region and loc.zone
            c = SimCluster(cluster_name, loc.cloud, loc.region, loc.zone)
            self.clusters[cluster_name] = c
            self._save()
            if self.launch_delay:
                await anyio.sleep(self.launch_delay)
            now = self.clock()
            c.state = "UP"
            self._note_attempt(key, task, c)
            j = self._submit(c, task, now)
            self._save()
            return LaunchResult(j.id, c.cloud, c.region, c.zone)
        raise ResourcesUnavailableError(f"no capacity for {cluster_name} in {len(plan)} location(s)")

    def _note_attempt(self, key: tuple[str, int], task: TaskSpec, c: SimCluster) -> None:
        if key in self._attempt_keys:
            self.violations.append(f"attempt {key[1]} of {key[0]} launched twice")
        self._attempt_keys.add(key)
        self.launch_log.append([key[0], key[1], c.cloud, c.region, c.zone, dict(task.envs)])

    async def job_status(self, cluster_name: str, job_id: int) -> JobInfo | None:
        c = self.clusters.get(cluster_name)
        now = self.clock()
        if c is None or c.state != "UP" or self._preempted(c, now):
            return None
        for j in c.jobs:
            if j.id == job_id:
                info = self._job_state(j, now)
                if info.status in ("SUCCEEDED", "FAILED", "FAILED_SETUP"):
                    self._count(c, j)
                return info
        return None

    async def cluster_status(self, cluster_name: str) -> str:
        c = self.clusters.get(cluster_name)
        if c is None:
            return "TERMINATED"
        now = self.clock()
        if self._preempted(c, now):
            for j in c.jobs:
                if j.outcome == "preempt" and now >= j.outcome_at:
                    self._count(c, j)
            return "PREEMPTED"
        return c.state

    async def cancel_job(self, cluster_name: str, job_id: int) -> None:
        c = self.clusters.get(cluster_name)
        if c is None:
            return
        now = self.clock()
        for j in c.jobs:
            if j.id == job_id and self._job_state(j, now).status in ("RUNNING", "SETTING_UP"):
                j.cancelled = True
        self._save()

    async def teardown(self, cluster_name: str) -> None:
        c = self.clusters.pop(cluster_name, None)
        if c is not None:
            self.teardowns += 1
            self._save()

    async def tail_logs(self, cluster_name: str, job_id: int, follow: bool) -> AsyncIterator[bytes]:
        yield f"(sim) job {job_id} on {cluster_name}\n".encode()
        while follow:
            info = await self.job_status(cluster_name, job_id)
            if info is None or info.status not in ("RUNNING", "SETTING_UP", "PENDING"):
                yield f"(sim) job {job_id}: {info.status if info else 'gone'}\n".encode()
                return
            await anyio.sleep(0.05)

    # -- persistence (tests) --------------------------------------------------------------

    def _save(self) -> None:
        if self.state_file is None:
            return
        data = {
            "clusters": {n: asdict(c) for n, c in self.clusters.items()},
            "consumed": self.consumed, "refused": [asdict(b) for b in self.refused],
            "fail_provision": self.fail_provision, "next_job_id": self.next_job_id,
            "launches": self.launches, "teardowns": self.teardowns,
            "launch_log": self.launch_log, "violations": self.violations,
            "attempt_keys": sorted(self._attempt_keys),
        }  # fmt: skip
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.state_file)

    def _load(self) -> None:
        assert self.state_file is not None
        d = json.loads(self.state_file.read_text())
        self.clusters = {
            n: SimCluster(**{**c, "jobs": [SimJob(**j) for j in c["jobs"]]})
            for n, c in d["clusters"].items()
        }
        self.consumed = d["consumed"]
        self.refused = [Block(**b) for b in d["refused"]]
        self.fail_provision = d["fail_provision"]
        self.next_job_id = d["next_job_id"]
        self.launches, self.teardowns = d["launches"], d["teardowns"]
        self.launch_log, self.violations = d["launch_log"], d["violations"]
        self._attempt_keys = {(k[0], int(k[1])) for k in d["attempt_keys"]}
