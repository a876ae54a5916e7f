"""Parsers for Slurm's command output (``scontrol show ... -o``, ``sbatch`` errors) and the
mapping of gres to canonical accelerators. Pure functions, no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from skyd.clouds.base import NODE_PENDING, NODE_PREEMPTED, NODE_RUNNING, NODE_TERMINATED


def kv_line(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value two`` (one ``scontrol -o`` record) -> dict. Values may hold
    spaces (e.g. ``Reason=Not responding``): a token without ``=`` continues the value."""
    out: dict[str, str] = {}
    last: str | None = None
    for tok in line.split(" "):
        if not tok:
            continue
        k, eq, v = tok.partition("=")
        if eq and re.match(r"^[A-Za-z][A-Za-z0-9_:/]*$", k):
            out[k] = v
            last = k
        elif last is not None:
            out[last] += " " + tok
    return out


def records(text: str) -> list[dict[str, str]]:
    return [kv_line(ln) for ln in text.splitlines() if "=" in ln]


def gres_gpus(gres: str) -> list[tuple[str | None, int]]:
    """``gpu:mi300x:8(S:0-1),gpu:h100:2,shard:4`` -> [("mi300x", 8), ("h100", 2)];
    untyped ``gpu:4`` -> [(None, 4)]."""
    out: list[tuple[str | None, int]] = []
    if not gres or gres in ("(null)", "N/A"):
        return out
    for part in re.split(r",(?![^(]*\))", gres):
        part = re.sub(r"\(.*?\)", "", part).strip()
        bits = part.split(":")
        if bits[0] != "gpu" or len(bits) < 2:
            continue
        if len(bits) == 2 and bits[1].isdigit():
            out.append((None, int(bits[1])))
        elif len(bits) >= 3 and bits[2].isdigit():
            out.append((bits[1], int(bits[2])))
    return out


def canonical_gpu(gres_type: str | None) -> str | None:
    """A gres type (``mi300x``, ``h100``, ``a100-80gb``, ``nvidia_h100_80gb_hbm3``) -> the
    canonical accelerator name (``MI300X``, ``H100``, ``A100-80GB``), or None if unknown."""
    if not gres_type:
        return None
    from skyd.models.accelerators import lookup_accelerator

    t = gres_type.strip()
    for cand in (t, t.replace("_", "-"), re.sub(r"^(nvidia|amd)[-_]", "", t, flags=re.I)):
        found = lookup_accelerator(cand)
        if found:
            return found
    from skyd.models.accelerators import normalize_device_name

    return normalize_device_name(t.replace("_", " "))


def alloc_gpus(tres: str) -> int:
    """``cpu=2,mem=1000M,gres/gpu=1,gres/gpu:mi300x=1`` -> 1."""
    m = re.search(r"gres/gpu=(\d+)", tres or "")
    return int(m.group(1)) if m else 0


@dataclass
class Partition:
    name: str
    nodes: list[str] = field(default_factory=list)
    state: str = "UP"
    cpus: int = 0  # per node (smallest)
    memory_gib: float = 0.0  # per node (smallest)
    accelerator: str | None = None
    gpus_per_node: int = 0  # of `accelerator` (largest node)
    gres_type: str | None = None
    total_gpus: int = 0
    free_gpus: int = 0
    default: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def partitions(part_text: str, node_text: str) -> list[Partition]:
    """From ``scontrol show partition -o`` and ``scontrol show node -o``."""
    nodes = {n.get("NodeName", ""): n for n in records(node_text)}
    out: list[Partition] = []
    for p in records(part_text):
        name = p.get("PartitionName", "")
        if not name:
            continue
        members = [n for n, rec in nodes.items() if name in rec.get("Partitions", "").split(",")]
        part = Partition(name, members, p.get("State", "UP"), default=p.get("Default") == "YES")
        cpus, mems = [], []
        for n in members:
            rec = nodes[n]
            cpus.append(int(rec.get("CPUTot", "0") or 0))
            mems.append(int(rec.get("RealMemory", "0") or 0) / 1024)
            gpus = gres_gpus(rec.get("Gres", ""))
            total = sum(c for _, c in gpus)
            st = rec.get("State", "")
            usable = not any(s in st for s in ("DOWN", "DRAIN", "FAIL", "INVAL", "NOT_RESPONDING"))
            part.total_gpus += total
            if usable:
                part.free_gpus += max(0, total - alloc_gpus(rec.get("AllocTRES", "")))
            for typ, c in gpus:
                if c > part.gpus_per_node:
                    part.gpus_per_node, part.gres_type = c, typ
        part.cpus = min(cpus) if cpus else 0
        part.memory_gib = round(min(mems), 1) if mems else 0.0
        part.accelerator = canonical_gpu(part.gres_type) if part.gpus_per_node else None
        out.append(part)
    return out


# Job states (squeue/scontrol ``JobState``) -> node states. A job that ends while skyd still
# holds the cluster (scancel from outside, preemption, the time limit, a failed node) is a
# preemption: managed jobs recover.
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                            "RESIZING", "SUSPENDED"})  # fmt: skip
PREEMPTED_STATES = frozenset({"PREEMPTED", "TIMEOUT", "NODE_FAIL", "CANCELLED", "BOOT_FAIL",
                              "DEADLINE", "OUT_OF_MEMORY", "FAILED", "REVOKED"})  # fmt: skip


# Pending reasons that never clear by waiting: the request does not fit the partition's limits.
IMPOSSIBLE_REASONS = frozenset({
    "PartitionNodeLimit", "PartitionConfig", "PartitionTimeLimit", "BadConstraints", "InvalidQOS",
    "InvalidAccount", "QOSMaxNodePerJobLimit", "QOSMaxGRESPerJob", "QOSMaxCpuPerJobLimit",
    "QOSMaxWallDurationPerJobLimit", "AssocMaxNodesPerJobLimit", "AssocMaxWallDurationPerJobLimit",
    "AssocMaxGRESPerJob", "AssocMaxCpuPerJobLimit", "QOSMinGRES", "MaxMemPerLimit",
})  # fmt: skip


def job_node_state(job_state: str | None) -> str:
    if job_state is None:
        return NODE_PREEMPTED  # the controller forgot it: it ended while we held it
    s = job_state.split()[0].upper()
    if s in PENDING_STATES:
        return NODE_PENDING
    if s in ("RUNNING", "COMPLETING", "STAGE_OUT"):
        return NODE_RUNNING
    if s in PREEMPTED_STATES:
        return NODE_PREEMPTED
    return NODE_TERMINATED  # COMPLETED: the step ended (the agent exited on purpose)


# sbatch refusals: (pattern, scope). "zone" is the partition: another partition or cluster
# may serve the request.
SBATCH_REFUSALS: tuple[tuple[str, str], ...] = (
    ("Requested node configuration is not available", "zone"),
    ("Invalid partition name", "zone"),
    ("invalid partition", "zone"),
    ("Node count specification invalid", "zone"),
    ("Invalid generic resource", "zone"),
    ("More processors requested than permitted", "zone"),
    ("Requested time limit is invalid", "zone"),
    ("Job violates accounting/QOS policy", "region"),
    ("Invalid account", "region"),
    ("Invalid qos", "region"),
    ("Access/permission denied", "region"),
    ("User's group not permitted", "zone"),
    ("Unable to contact slurm controller", "region"),
)


def sbatch_error(stderr: str) -> tuple[str, str]:
    """(reason, scope) of a refused sbatch: the last ``error:`` line, and what it rules out."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errs = [ln.split("error:", 1)[1].strip() for ln in lines if "error:" in ln]
    reason = (errs[-1] if errs else (lines[-1] if lines else "sbatch failed")).removeprefix(
        "Batch job submission failed: ")
    for pat, scope in SBATCH_REFUSALS:
        if pat.lower() in stderr.lower():
            return reason, scope
    return reason, "zone"
