"""SkyPilot's Python SDK over skyd: a script written for ``import sky`` runs with one
changed import, ``import skyd.sky as sky`` (see docs/sdk.md).

Mutating calls return a request id (``sky.get(rid)`` waits for the result,
``sky.stream_and_get(rid)`` prints the request's output as it comes and returns the
result), as SkyPilot 0.14's client SDK does; reads (``status``, ``queue``) too, so
``sky.get(sky.status())`` works as in SkyPilot. Built on :mod:`skyd.sdk`.
"""

from __future__ import annotations

from typing import Any

from skyd.sky import jobs, serve
from skyd.sky.admin_policy import (
    AdminPolicy,
    Config,
    MutatedUserRequest,
    PolicyInterface,
    RequestOptions,
    UserRequest,
)
from skyd.sky.api import (
    api_cancel,
    api_status,
    autostop,
    cancel,
    down,
    exec,
    get,
    launch,
    optimize,
    queue,
    start,
    status,
    stop,
    stream_and_get,
    tail_logs,
)
from skyd.sky.clouds import (
    AWS,
    DO,
    GCP,
    OCI,
    SSH,
    Azure,
    ClusterStatus,
    JobStatus,
    Kubernetes,
    Lambda,
    ManagedJobStatus,
    Nebius,
    RunPod,
    Slurm,
    Vast,
)
from skyd.sky.task import Dag, Resources, Task

__all__ = [
    "AWS", "DO", "GCP", "OCI", "SSH", "Azure", "ClusterStatus", "JobStatus", "Kubernetes",
    "Lambda", "ManagedJobStatus", "Nebius", "RunPod", "Slurm", "Vast",
    "AdminPolicy", "Config", "Dag", "MutatedUserRequest", "PolicyInterface",
    "RequestOptions", "Resources", "Task", "UserRequest", "api_cancel", "api_status",
    "autostop", "cancel", "down", "exec", "get", "jobs", "launch", "optimize", "queue",
    "serve", "start", "status", "stop", "stream_and_get", "tail_logs",
]


def __getattr__(name: str) -> Any:
    # async variants: sky.launch_async etc. are skyd.sky.aio's coroutines
    if name.endswith("_async") or name == "aio":
        import importlib

        aio = importlib.import_module("skyd.sky.aio")
        if name == "aio":
            return aio
        return getattr(aio, name[: -len("_async")])
    raise AttributeError(f"module 'skyd.sky' has no attribute {name!r}")

