"""The shipped task validator: vendor-specific GPU tooling vs. the candidates' vendor."""

from __future__ import annotations

import re

from skyd.models.accelerators import get_accelerator_info
from skyd.models.task import Task, register_task_validator

NVIDIA_TOOLING = re.compile(r"(?<![\w-])(nvidia-smi|CUDA_VISIBLE_DEVICES|nvcc)(?![\w-])")
AMD_TOOLING = re.compile(
    r"(?<![\w-])(rocm-smi|amd-smi|HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|hipcc)(?![\w-])")


def _vendors(task: Task) -> set[str] | None:
    """Vendors of the candidates, or None when some candidate has no accelerator."""
    out: set[str] = set()
    for r in task.resources:
        acc = r.accelerator
        if acc is None:
            return None
        info = get_accelerator_info(acc[0])
        if info is None:
            return None
        out.add(info.vendor)
    return out


def vendor_tooling_validator(task: Task) -> list[str]:
    """Warn when run/setup uses NVIDIA tooling but every candidate is AMD, and vice versa."""
    vendors = _vendors(task)
    if not vendors or len(vendors) != 1:
        return []
    vendor = next(iter(vendors))
    accs = sorted({r.accelerator[0] for r in task.resources if r.accelerator})
    warnings: list[str] = []
    for field in ("setup", "run"):
        text = getattr(task, field) or ""
        if vendor == "amd":
            found = sorted(set(NVIDIA_TOOLING.findall(text)))
            if found:
                warnings.append(
                    f"{field} uses NVIDIA tooling ({', '.join(found)}) but every candidate is "
                    f"an AMD accelerator ({', '.join(accs)}); use rocm-smi/amd-smi and "
                    "HIP_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES, or add an NVIDIA candidate")
        elif vendor == "nvidia":
            found = sorted(set(AMD_TOOLING.findall(text)))
            if found:
                warnings.append(
                    f"{field} uses AMD ROCm tooling ({', '.join(found)}) but every candidate "
                    f"is an NVIDIA accelerator ({', '.join(accs)}); use nvidia-smi and "
                    "CUDA_VISIBLE_DEVICES, or add an AMD candidate (e.g. MI300X)")
    return warnings


register_task_validator(vendor_tooling_validator)
