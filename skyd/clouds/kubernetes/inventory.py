"""What one context offers: its nodes, their accelerators, and the GPUs pods hold.

GPUs in use are counted from every pod in every namespace that still holds them (pending
pods bound to a node, running pods); finished pods (Succeeded, Failed) hold none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skyd.clouds.kubernetes.labels import (
    AMD_KEY,
    NVIDIA_KEY,
    NodeGPUs,
    cpu_quantity,
    memory_gib,
    node_gpus,
)

SPOT_LABELS = (
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/gke-preemptible", "true"),
    ("karpenter.sh/capacity-type", "spot"),
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
)


@dataclass
class Node:
    name: str
    labels: dict[str, str]
    cpus: float
    memory_gib: float
    gpus: list[NodeGPUs]
    taints: list[dict[str, Any]]
    ready: bool
    used: dict[str, int] = field(default_factory=dict)  # resource key -> GPUs held by pods

    @property
    def spot(self) -> bool:
        return any(self.labels.get(k) == v for k, v in SPOT_LABELS)

    def free(self, key: str) -> int:
        total = sum(g.count for g in self.gpus if g.key == key)
        return max(0, total - self.used.get(key, 0))


def _ready(n: dict[str, Any]) -> bool:
    if (n.get("spec") or {}).get("unschedulable"):
        return False
    for c in (n.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return True


def build(nodes: dict[str, Any], pods: dict[str, Any]) -> list[Node]:
    """Nodes from a NodeList and the GPUs held per node from a PodList (all namespaces)."""
    out: dict[str, Node] = {}
    for n in nodes.get("items") or []:
        md, st = n.get("metadata") or {}, n.get("status") or {}
        alloc = st.get("allocatable") or {}
        out[md.get("name", "")] = Node(
            name=md.get("name", ""), labels=md.get("labels") or {}, cpus=cpu_quantity(alloc.get("cpu")),
            memory_gib=memory_gib(alloc.get("memory")), gpus=node_gpus(n),
            taints=(n.get("spec") or {}).get("taints") or [], ready=_ready(n))
    for p in pods.get("items") or []:
        st, spec = p.get("status") or {}, p.get("spec") or {}
        if st.get("phase") in ("Succeeded", "Failed"):
            continue
        node = out.get(spec.get("nodeName") or "")
        if node is None:
            continue
        for c in spec.get("containers") or []:
            res = c.get("resources") or {}
            want = {**(res.get("requests") or {}), **(res.get("limits") or {})}
            for key in (NVIDIA_KEY, AMD_KEY):
                if key in want:
                    node.used[key] = node.used.get(key, 0) + int(float(want[key]))
    return list(out.values())


def gpu_summary(nodes: list[Node]) -> dict[str, dict[str, int]]:
    """accelerator -> {total, free, max_per_node} over ready nodes."""
    out: dict[str, dict[str, int]] = {}
    for n in nodes:
        for g in n.gpus:
            row = out.setdefault(g.accelerator, {"total": 0, "free": 0, "max_per_node": 0})
            row["total"] += g.count
            free = min(g.count, n.free(g.key)) if n.ready else 0
            row["free"] += free
            row["max_per_node"] = max(row["max_per_node"], g.count)
    return out
