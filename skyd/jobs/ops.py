"""The seam between managed jobs and whatever launches clusters (the pipeline, or a sim).

The controller only ever talks to a `ClusterOps`. The daemon's implementation is backed by
the pipeline and the node agents; `skyd.jobs.sim.SimClusterOps` is an in-process simulation
for tests and scale benchmarks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from skyd.errors import SkydError

LogFn = Callable[[str], None]


class PrecheckError(SkydError):
    """The task cannot be launched at all (bad credentials, unsupported feature, invalid
    cluster name …): the managed job ends FAILED_PRECHECKS, no retry."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class Block:
    """A location to avoid (or, as `TaskSpec.pin`, to stay in). None = any."""

    cloud: str | None = None
    region: str | None = None
    zone: str | None = None

    def matches(self, cloud: str | None, region: str | None, zone: str | None) -> bool:
        return (
            (self.cloud is None or self.cloud == cloud)
            and (self.region is None or self.region == region)
            and (self.zone is None or self.zone == zone)
        )


@dataclass(frozen=True, slots=True)
class RecoverySettings:
    strategy: str | None = None  # None: the registry's default
    max_restarts_on_errors: int = 0
    recover_on_exit_codes: tuple[int, ...] = ()


@dataclass(frozen=True)
class TaskSpec:
    """What one launch of one task of a managed job needs."""

    name: str
    task: dict[str, Any]  # the normalized task dict (opaque to the jobs layer)
    job_id: int
    task_index: int
    attempt: int  # 1-based, unique per (job, task); informational for ClusterOps
    envs: dict[str, str] = field(default_factory=dict)  # injected; stable across recoveries
    recovery: RecoverySettings = RecoverySettings()
    region_pinned: bool = False  # the user fixed the region (or zone) in the task
    zone_pinned: bool = False
    pin: Block | None = None  # set by a recovery strategy: stay inside this location
    secrets_ref: str | None = None  # the job's secrets file (skyd.jobs.job_secrets)
    catalog_dir: str | None = None  # the submitter's SKYD_CATALOG_DIR (None: the daemon's)


@dataclass(frozen=True, slots=True)
class LaunchResult:
    job_id: int  # the job id on the cluster (lower level)
    cloud: str
    region: str | None
    zone: str | None


@dataclass(frozen=True, slots=True)
class JobInfo:
    status: str  # lower JobStatus: INIT PENDING SETTING_UP RUNNING SUCCEEDED FAILED
    #              FAILED_SETUP FAILED_DRIVER CANCELLED
    exit_code: int | None = None


@runtime_checkable
class ClusterOps(Protocol):
    async def launch(
        self, task: TaskSpec, cluster_name: str, *, blocked: Sequence[Block], log: LogFn
    ) -> LaunchResult:
        """Provision `cluster_name` (fail over over the ranked plan, skipping `blocked`,
        staying inside `task.pin` when set; reuse the cluster when it is already UP) and
        submit the task's job with `task.envs`. Raises ResourcesUnavailableError when
        nothing is launchable, PrecheckError when nothing ever will be."""
        ...

    async def job_status(self, cluster_name: str, job_id: int) -> JobInfo | None:
        """The job's lower status + exit code; None when the agent is unreachable."""
        ...

    async def cluster_status(self, cluster_name: str) -> str:
        """'UP' | 'INIT' | 'STOPPED' | 'PREEMPTED' | 'TERMINATED', asking the provider."""
        ...

    async def cancel_job(self, cluster_name: str, job_id: int) -> None: ...

    async def teardown(self, cluster_name: str) -> None:
        """Remove the cluster and everything on it. Idempotent (no cluster: no-op)."""
        ...

    def tail_logs(self, cluster_name: str, job_id: int, follow: bool) -> AsyncIterator[bytes]:
        """The job's output (an async generator)."""
        ...
