"""The launch pipeline: a task's YAML to running nodes — load, plan, provision, set up,
run, and the clusters' lifecycle (docs/pipeline.md). The daemon plugin is
``skyd.pipeline.verbs``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyd import face

_FACE = {
    "AgentBackend": "backend",
    "agent": "agents",
    "agent_healthy": "agents",
    "capacity": "checks",
    "check_local_paths": "launch",
    "cluster_lock": "locks",
    "forget": "provision",
    "load_dag_from_payload": "taskload",
    "load_dag_with_overrides": "taskload",
}
__all__ = [
    "AgentBackend", "agent", "agent_healthy", "capacity", "check_local_paths",
    "cluster_lock", "forget", "load_dag_from_payload", "load_dag_with_overrides",
    "clusters_db", "planner", "sshconfig",
]
__getattr__ = face.lazy(__name__, _FACE)

if TYPE_CHECKING:
    from skyd.pipeline.agents import agent, agent_healthy
    from skyd.pipeline.backend import AgentBackend
    from skyd.pipeline.checks import capacity
    from skyd.pipeline.launch import check_local_paths
    from skyd.pipeline.locks import cluster_lock
    from skyd.pipeline.provision import forget
    from skyd.pipeline.taskload import load_dag_from_payload, load_dag_with_overrides
