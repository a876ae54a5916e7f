"""Job spec as plain data, and conversions to/from the wire messages. Python 3.8 compatible."""

# ruff: noqa: UP031, UP041, UP006, UP035, UP045  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Union

from ..proto import skyd_agent as pb

SPEC_FIELDS = ("name", "setup", "run", "envs", "workdir", "num_nodes", "cpus", "gpus", "nodes",
               "task_id", "username", "cluster_info", "secrets")  # fmt: skip


@dataclass
class NodeRef:
    rank: int
    address: str  # host:port of that node's agent, reachable from the head
    internal_ip: str = ""


@dataclass
class JobSpec:
    run: str = ""
    name: str = ""
    setup: str = ""
    envs: dict[str, str] = field(default_factory=dict)
    workdir: str = ""
    num_nodes: int = 1
    cpus: float = 0.0
    gpus: int = 0
    nodes: list[NodeRef] = field(default_factory=list)
    task_id: str = ""
    username: str = ""
    cluster_info: str = ""
    secrets: dict[str, str] = field(default_factory=dict)  # env vars kept out of jobs.db


SpecLike = Union[JobSpec, Dict[str, Any], "pb.JobSpec"]


def spec_to_dict(spec: SpecLike) -> dict[str, Any]:
    """Normalise a JobSpec dataclass, a dict or a wire JobSpec to a plain dict."""
    if isinstance(spec, pb.JobSpec):
        d: dict[str, Any] = {k: getattr(spec, k) for k in SPEC_FIELDS}
        d["envs"] = dict(spec.envs)
        d["secrets"] = dict(spec.secrets)
        d["nodes"] = [
            {"rank": n.rank, "address": n.address, "internal_ip": n.internal_ip} for n in spec.nodes
        ]
    elif dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        d = dataclasses.asdict(spec)
    elif isinstance(spec, dict):
        unknown = set(spec) - set(SPEC_FIELDS)
        if unknown:
            raise ValueError("unknown job spec field(s): {}".format(", ".join(sorted(unknown))))
        d = dict(spec)
    else:
        raise TypeError("job spec must be a JobSpec, a dict or a wire JobSpec")
    d.setdefault("run", "")
    d["envs"] = {str(k): "" if v is None else str(v) for k, v in (d.get("envs") or {}).items()}
    d["secrets"] = {str(k): "" if v is None else str(v)
                    for k, v in (d.get("secrets") or {}).items()}  # fmt: skip
    d["nodes"] = [
        {"rank": int(n["rank"]), "address": str(n.get("address", "")),
         "internal_ip": str(n.get("internal_ip", ""))}
        for n in (d.get("nodes") or [])
    ]  # fmt: skip
    d["num_nodes"] = max(1, int(d.get("num_nodes") or 1))
    d["cpus"] = float(d.get("cpus") or 0)
    d["gpus"] = int(d.get("gpus") or 0)
    for k in ("name", "setup", "workdir", "task_id", "username", "cluster_info"):
        d[k] = str(d.get(k) or "")
    return d


def validate_spec(d: dict[str, Any]) -> str | None:
    """A message naming the field and the fix, or None when the spec is usable."""
    if d["cpus"] < 0 or d["gpus"] < 0:
        return "cpus and gpus must be >= 0"
    if d["num_nodes"] > 1:
        ranks = sorted(n["rank"] for n in d["nodes"])
        if ranks != list(range(d["num_nodes"])):
            return "nodes: a %d-node job needs one entry per rank 0..%d (got ranks %s)" % (
                d["num_nodes"], d["num_nodes"] - 1, ranks)  # fmt: skip
        if any(not n["address"] for n in d["nodes"] if n["rank"] > 0):
            return "nodes: every worker (rank > 0) needs the address host:port of its agent"
    return None


def spec_to_proto(spec: SpecLike) -> pb.JobSpec:
    d = spec_to_dict(spec)
    return pb.JobSpec(
        name=d["name"], setup=d["setup"], run=d["run"], envs=d["envs"], workdir=d["workdir"],
        num_nodes=d["num_nodes"], cpus=d["cpus"], gpus=d["gpus"],
        nodes=[pb.NodeRef(rank=n["rank"], address=n["address"], internal_ip=n["internal_ip"])
               for n in d["nodes"]],
        task_id=d["task_id"], username=d["username"], cluster_info=d["cluster_info"],
        secrets=d["secrets"],
    )  # fmt: skip


def job_to_proto(job: dict[str, Any], log_path: str) -> pb.JobInfo:
    return pb.JobInfo(
        job_id=job["job_id"], name=job["name"], status=job["status"], username=job["username"],
        submitted_at=job["submitted_at"], start_at=job["start_at"] or 0.0,
        end_at=job["end_at"] or 0.0, exit_code=job["exit_code"], num_nodes=job["num_nodes"],
        cpus=job["cpus"], gpus=job["gpus"], gpu_slots=list(job["gpu_slots"]),
        task_id=job["task_id"], log_path=log_path, reason=job["reason"],
    )  # fmt: skip


def job_from_proto(j: pb.JobInfo) -> dict[str, Any]:
    return {
        "job_id": j.job_id, "name": j.name, "status": j.status, "username": j.username,
        "submitted_at": j.submitted_at, "start_at": j.start_at or None,
        "end_at": j.end_at or None, "exit_code": j.exit_code, "num_nodes": j.num_nodes,
        "cpus": j.cpus, "gpus": j.gpus, "gpu_slots": list(j.gpu_slots), "task_id": j.task_id,
        "log_path": j.log_path, "reason": j.reason,
    }  # fmt: skip
