"""Accelerators of a Kubernetes node, from its labels and allocatable resources.

Stdlib plus ``skyd.models`` only: the discovery is pure so the planner, ``show-gpus`` and
tests share it. Labels read (first match wins per vendor):

- NVIDIA: ``nvidia.com/gpu.product`` (GPU feature discovery), ``cloud.google.com/gke-accelerator``
  (GKE), ``karpenter.k8s.aws/instance-gpu-name`` (Karpenter), ``skypilot.co/accelerator``;
  count from allocatable ``nvidia.com/gpu``.
- AMD: a PCI device id (``beta.amd.com/gpu.device-id.<hex>=<count>``, or
  ``amd.com/gpu.device-id=<hex>``) wins over ``amd.com/gpu.product-name`` (the marketing name
  with spaces as underscores, sometimes without the trailing X); count from allocatable
  ``amd.com/gpu``, else the device-id label's count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from skyd.models.accelerators import ACCELERATOR_REGISTRY, lookup_accelerator, normalize_device_name
from skyd.nodeagent.gpu import AMD_DEVICE_IDS as _AGENT_AMD_IDS

NVIDIA_KEY = "nvidia.com/gpu"
AMD_KEY = "amd.com/gpu"

#: PCI device id (lower-case hex, no 0x) -> canonical AMD accelerator: the node agent's table
AMD_DEVICE_IDS: dict[str, str] = {f"{dev:04x}": name for dev, name in _AGENT_AMD_IDS.items()}

NVIDIA_LABELS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "karpenter.k8s.aws/instance-gpu-name",
    "skypilot.co/accelerator",
)
AMD_PRODUCT = "amd.com/gpu.product-name"
AMD_DEVICE_ID = "amd.com/gpu.device-id"
AMD_DEVICE_ID_PREFIX = "beta.amd.com/gpu.device-id."
_GKE_PREFIX = re.compile(r"^nvidia-(tesla-)?", re.I)


@dataclass(frozen=True)
class NodeGPUs:
    """What one node offers: accelerator name, resource key and allocatable count."""

    accelerator: str
    key: str  # nvidia.com/gpu or amd.com/gpu
    count: int


def _hex(s: str) -> str:
    s = s.strip().lower()
    return s[2:] if s.startswith("0x") else s


def _int(v: Any) -> int:
    try:
        return int(float(str(v)))
    except (TypeError, ValueError):
        return 0


def nvidia_name(raw: str) -> str | None:
    """``NVIDIA-H100-80GB-HBM3`` (GFD), ``nvidia-tesla-t4`` / ``nvidia-l4`` (GKE), ``h100``
    (Karpenter) -> canonical name."""
    s = raw.strip()
    if not s:
        return None
    direct = lookup_accelerator(s)
    if direct is not None and direct != "NVIDIA":
        return direct
    gke = _GKE_PREFIX.sub("", s)
    if gke != s:
        hit = lookup_accelerator(gke) or lookup_accelerator(gke.replace("-", ""))
        if hit:
            return hit
    return normalize_device_name(s.replace("-", " "))


def amd_product_name(raw: str) -> str | None:
    """``AMD_Instinct_MI300X_OAM`` / ``Instinct_MI210`` / ``AMD_Instinct_MI308`` (no X) ->
    canonical name."""
    hit = normalize_device_name(raw)
    if hit is not None and hit in ACCELERATOR_REGISTRY:
        return hit
    m = re.search(r"MI\s*(\d{3})", raw.upper().replace("_", " "))
    if m and f"MI{m.group(1)}X" in ACCELERATOR_REGISTRY:
        return f"MI{m.group(1)}X"
    return None


def amd_gpus(labels: dict[str, str], allocatable: dict[str, Any]) -> NodeGPUs | None:
    count = _int(allocatable.get(AMD_KEY))
    name: str | None = None
    for k, v in labels.items():
        if k.startswith(AMD_DEVICE_ID_PREFIX):
            name = AMD_DEVICE_IDS.get(_hex(k[len(AMD_DEVICE_ID_PREFIX):]))
            if name:
                count = count or _int(v)
                break
    if name is None and labels.get(AMD_DEVICE_ID):
        name = AMD_DEVICE_IDS.get(_hex(labels[AMD_DEVICE_ID]))
    if name is None and labels.get(AMD_PRODUCT):
        name = amd_product_name(labels[AMD_PRODUCT])
    if name is None or count <= 0:
        return None
    return NodeGPUs(name, AMD_KEY, count)


def nvidia_gpus(labels: dict[str, str], allocatable: dict[str, Any]) -> NodeGPUs | None:
    count = _int(allocatable.get(NVIDIA_KEY))
    if count <= 0:
        return None
    for k in NVIDIA_LABELS:
        if labels.get(k):
            name = nvidia_name(labels[k])
            if name:
                return NodeGPUs(name, NVIDIA_KEY, count)
    return None


def node_gpus(node: dict[str, Any]) -> list[NodeGPUs]:
    """Every vendor's GPUs on a node (a Node object as the API returns it, camelCase)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return [g for g in (nvidia_gpus(labels, alloc), amd_gpus(labels, alloc)) if g is not None]


def cpu_quantity(v: Any) -> float:
    """``"4"``, ``"3500m"`` -> vCPUs."""
    s = str(v or "0").strip()
    if s.endswith("m"):
        return float(s[:-1] or 0) / 1000.0
    try:
        return float(s)
    except ValueError:
        return 0.0


_MEM_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 1e3, "M": 1e6, "G": 1e9,
              "T": 1e12, "k": 1e3, "m": 1e-3}


def memory_gib(v: Any) -> float:
    """``"16Gi"``, ``"16384Mi"``, ``"17179869184"`` -> GiB."""
    s = str(v or "0").strip()
    for unit in sorted(_MEM_UNITS, key=len, reverse=True):
        if s.endswith(unit):
            try:
                return float(s[: -len(unit)]) * _MEM_UNITS[unit] / 2**30
            except ValueError:
                return 0.0
    try:
        return float(s) / 2**30
    except ValueError:
        return 0.0
