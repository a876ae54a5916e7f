"""Managed-job state names (the upper state machine) and schedule states."""

from __future__ import annotations

import enum


class ManagedJobStatus(enum.StrEnum):
    PENDING = "PENDING"  # waiting for a launch slot
    STARTING = "STARTING"  # launching the cluster (first attempt of a task)
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"  # relaunching after preemption / restart
    CANCELLING = "CANCELLING"
    SUCCEEDED = "SUCCEEDED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    FAILED_SETUP = "FAILED_SETUP"
    FAILED_PRECHECKS = "FAILED_PRECHECKS"
    FAILED_NO_RESOURCE = "FAILED_NO_RESOURCE"
    FAILED_CONTROLLER = "FAILED_CONTROLLER"

    @property
    def terminal(self) -> bool:
        return self.value in TERMINAL


TERMINAL: frozenset[str] = frozenset(
    {
        "SUCCEEDED",
        "CANCELLED",
        "FAILED",
        "FAILED_SETUP",
        "FAILED_PRECHECKS",
        "FAILED_NO_RESOURCE",
        "FAILED_CONTROLLER",
    }
)
# A controller may only move a job that is in one of these states; CANCELLING belongs to the
# cancel path, terminal states to nobody.
ACTIVE: frozenset[str] = frozenset({"PENDING", "STARTING", "RUNNING", "RECOVERING"})

# Lower (node) JobStatus values as ClusterOps reports them.
LOWER_ACTIVE: frozenset[str] = frozenset({"INIT", "PENDING", "SETTING_UP", "RUNNING"})

# Attempt statuses beyond the lower JobStatus ones.
ATTEMPT_LAUNCHING = "LAUNCHING"  # intended cluster persisted, launch in flight
ATTEMPT_LAUNCH_FAILED = "LAUNCH_FAILED"
ATTEMPT_PREEMPTED = "PREEMPTED"
ATTEMPT_INTERRUPTED = "INTERRUPTED"  # controller died mid-launch; cluster torn down
