"""Managed jobs: a controller per job that launches, watches and recovers its cluster,
state in the daemon's store (docs/jobs.md). The daemon plugin is ``skyd.jobs.verbs``; the
CLI's ``skyd jobs`` is ``skyd.jobs.cli``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyd import face

_FACE = {
    "Block": "ops",
    "CONTROLLER_LOG": "logfile",
    "ClusterOps": "ops",
    "JobsDB": "state",
    "PipelineClusterOps": "pipeline_ops",
    "TaskSpec": "ops",
    "saved_log": "pipeline_ops",
}
__all__ = [
    "Block", "CONTROLLER_LOG", "ClusterOps", "JobsDB", "PipelineClusterOps", "TaskSpec",
    "saved_log",
]
__getattr__ = face.lazy(__name__, _FACE)

if TYPE_CHECKING:
    from skyd.jobs.logfile import CONTROLLER_LOG
    from skyd.jobs.ops import Block, ClusterOps, TaskSpec
    from skyd.jobs.pipeline_ops import PipelineClusterOps, saved_log
    from skyd.jobs.state import JobsDB
