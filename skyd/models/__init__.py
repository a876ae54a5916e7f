"""Task model: Resources, Task, Dag (pydantic v2); YAML loading; env substitution; validators.

Imports only pydantic and yaml. See docs/models.md.
"""

from skyd.models import vendor_check as _vendor_check  # registers the shipped validator
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
from skyd.models.resources import (
    DEFAULT_DISK_SIZE_GB,
    Autostop,
    JobRecovery,
    Resources,
)
from skyd.models.service import ReadinessProbe, ReplicaPolicy, ServiceSpec
from skyd.models.storage import FileMount
from skyd.models.task import (
    REDACTED,
    Task,
    WorkdirGit,
    register_task_validator,
    registered_task_validators,
)

__all__ = [
    "ACCELERATOR_REGISTRY", "AcceleratorInfo", "Autostop", "CLOUD_ALIASES",
    "DEFAULT_DISK_SIZE_GB", "Dag", "FileMount", "JobRecovery", "KNOWN_CLOUDS", "REDACTED",
    "ReadinessProbe", "ReplicaPolicy", "Resources", "ServiceSpec", "Task", "WorkdirGit",
    "accelerator_info", "canonical_accelerator", "expand_accelerators", "expand_resources",
    "format_infra", "get_accelerator_info", "load_dag", "load_task", "normalize_device_name", "parse_accelerator_spec",
    "parse_env_file", "parse_infra", "register_task_validator", "registered_task_validators",
    "task_from_config",
]

del _vendor_check
