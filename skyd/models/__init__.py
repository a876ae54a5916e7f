"""Task model: Resources, Task, Dag (pydantic v2); YAML loading; env substitution; validators.

Imports only pydantic and yaml. See docs/models.md. Importing the package, or a light
module of it (``redaction``, ``parsing``), builds no model class: each name below loads its
module on first use (the daemon starts without the task models until a request needs them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyd import face

_FACE = {
    "ACCELERATOR_REGISTRY": "accelerators", "AcceleratorInfo": "accelerators",
    "accelerator_info": "accelerators", "canonical_accelerator": "accelerators",
    "expand_accelerators": "accelerators", "get_accelerator_info": "accelerators",
    "normalize_device_name": "accelerators", "parse_accelerator_spec": "accelerators",
    "Dag": "dag",
    "parse_env_file": "envsubst",
    "expand_resources": "expand",
    "load_dag": "loader", "load_task": "loader", "task_from_config": "loader",
    "CLOUD_ALIASES": "parsing", "KNOWN_CLOUDS": "parsing", "format_infra": "parsing",
    "parse_infra": "parsing",
    "REDACTED": "redaction",
    "DEFAULT_DISK_SIZE_GB": "resources", "Autostop": "resources", "JobRecovery": "resources",
    "Resources": "resources",
    "ReadinessProbe": "service", "ReplicaPolicy": "service", "ServiceSpec": "service",
    "FileMount": "storage",
    "Task": "task", "WorkdirGit": "task", "register_task_validator": "task",
    "registered_task_validators": "task",
}
__all__ = [
    "ACCELERATOR_REGISTRY", "AcceleratorInfo", "Autostop", "CLOUD_ALIASES", "DEFAULT_DISK_SIZE_GB",
    "Dag", "FileMount", "JobRecovery", "KNOWN_CLOUDS", "REDACTED", "ReadinessProbe",
    "ReplicaPolicy", "Resources", "ServiceSpec", "Task", "WorkdirGit", "accelerator_info",
    "canonical_accelerator", "expand_accelerators", "expand_resources", "format_infra",
    "get_accelerator_info", "load_dag", "load_task", "normalize_device_name",
    "parse_accelerator_spec", "parse_env_file", "parse_infra", "register_task_validator",
    "registered_task_validators", "task_from_config",
]
__getattr__ = face.lazy(__name__, _FACE)

if TYPE_CHECKING:
    from skyd.models.accelerators import (
        ACCELERATOR_REGISTRY,
        AcceleratorInfo,
        accelerator_info,
        canonical_accelerator,
        expand_accelerators,
        get_accelerator_info,
        normalize_device_name,
        parse_accelerator_spec,
    )
    from skyd.models.dag import Dag
    from skyd.models.envsubst import parse_env_file
    from skyd.models.expand import expand_resources
    from skyd.models.loader import load_dag, load_task, task_from_config
    from skyd.models.parsing import CLOUD_ALIASES, KNOWN_CLOUDS, format_infra, parse_infra
    from skyd.models.redaction import REDACTED
    from skyd.models.resources import DEFAULT_DISK_SIZE_GB, Autostop, JobRecovery, Resources
    from skyd.models.service import ReadinessProbe, ReplicaPolicy, ServiceSpec
    from skyd.models.storage import FileMount
    from skyd.models.task import (
        Task,
        WorkdirGit,
        register_task_validator,
        registered_task_validators,
    )
