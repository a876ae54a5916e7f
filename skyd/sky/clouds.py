"""``sky.AWS()``, ``sky.GCP()``, ... (``Resources(cloud=sky.AWS())``) and the status enums
scripts compare records with (``record["status"] == sky.ClusterStatus.UP``)."""

from __future__ import annotations

from enum import StrEnum


class Cloud:
    """A cloud named the SkyPilot way; skyd only needs its name (``str(cloud)``)."""

    _NAME = ""

    def __str__(self) -> str:
        return self._NAME

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return str(other).lower() == self._NAME

    def __hash__(self) -> int:
        return hash(self._NAME)


def _cloud(cls_name: str, name: str) -> type[Cloud]:
    return type(cls_name, (Cloud,), {"_NAME": name})


AWS = _cloud("AWS", "aws")
GCP = _cloud("GCP", "gcp")
Azure = _cloud("Azure", "azure")
Kubernetes = _cloud("Kubernetes", "kubernetes")
SSH = _cloud("SSH", "ssh")
Slurm = _cloud("Slurm", "slurm")
RunPod = _cloud("RunPod", "runpod")
Lambda = _cloud("Lambda", "lambda")
DO = _cloud("DO", "do")
Vast = _cloud("Vast", "vast")
Nebius = _cloud("Nebius", "nebius")
OCI = _cloud("OCI", "oci")


class ClusterStatus(StrEnum):
    INIT = "INIT"
    UP = "UP"
    STOPPED = "STOPPED"


class JobStatus(StrEnum):
    INIT = "INIT"
    PENDING = "PENDING"
    SETTING_UP = "SETTING_UP"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    FAILED_SETUP = "FAILED_SETUP"
    FAILED_DRIVER = "FAILED_DRIVER"
    CANCELLED = "CANCELLED"


class ManagedJobStatus(StrEnum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    CANCELLING = "CANCELLING"
    SUCCEEDED = "SUCCEEDED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    FAILED_SETUP = "FAILED_SETUP"
    FAILED_PRECHECKS = "FAILED_PRECHECKS"
    FAILED_NO_RESOURCE = "FAILED_NO_RESOURCE"
    FAILED_CONTROLLER = "FAILED_CONTROLLER"
