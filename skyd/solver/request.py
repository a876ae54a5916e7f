"""Plain inputs of the solver (no pydantic): skyd.pipeline.planner builds these from skyd.models."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ResourceRequest:
    """One resource candidate of a task (one entry of ``any_of`` / ``ordered``)."""

    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    accelerator: str | None = None  # canonical name (case-insensitive match is tolerated)
    accelerator_count: float = 0.0  # 0 if none
    cpus: float | None = None
    cpus_plus: bool = False  # "4+" = at least 4
    memory_gib: float | None = None
    memory_plus: bool = False
    use_spot: bool | None = None  # None = on-demand (SkyPilot's default)

    def describe(self) -> str:
        """Short human form used in error messages, e.g. ``A100:8 on aws in us-east-1``."""
        parts: list[str] = []
        if self.accelerator:
            parts.append(f"{self.accelerator}:{fmt_count(self.accelerator_count)}")
        if self.instance_type:
            parts.append(self.instance_type)
        if self.cpus is not None:
            parts.append(f"cpus={fmt_count(self.cpus)}{'+' if self.cpus_plus else ''}")
        if self.memory_gib is not None:
            parts.append(f"memory={fmt_count(self.memory_gib)}{'+' if self.memory_plus else ''}")
        if not parts:
            parts.append("default CPU instance")
        if self.use_spot:
            parts.append("[spot]")
        if self.cloud:
            parts.append(f"on {self.cloud}")
        if self.region:
            parts.append(f"in region {self.region}")
        if self.zone:
            parts.append(f"in zone {self.zone}")
        return " ".join(parts)


@dataclass
class TaskRequest:
    name: str
    candidates: list[ResourceRequest] = field(default_factory=lambda: [ResourceRequest()])
    ordered: bool = False  # True: `ordered:` list, use the first candidate that has launchables
    num_nodes: int = 1
    estimated_runtime_s: float | None = None  # None = 1 hour (SkyPilot's default)
    input_gb: float = 0.0  # size of `inputs:` data
    input_cloud: str | None = None  # where the inputs live (e.g. "aws" for s3://)
    input_region: str | None = None
    output_gb: float = 0.0  # size of outputs sent to each downstream task
    group: str | None = None  # job group id: members share cloud and region


@dataclass
class DagRequest:
    tasks: list[TaskRequest]
    edges: list[tuple[int, int]] = field(default_factory=list)  # (parent index, child index)


@dataclass(frozen=True)
class Block:
    """A blocked resource: a candidate matching every non-None field is excluded."""

    cloud: str
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    use_spot: bool | None = None


def fmt_count(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def parse_count(s: str | None) -> tuple[float | None, bool]:
    """A task's count as the model keeps it (``"4"``, ``"4+"``, ``"16x"``): (the number,
    whether it is "at least"); (None, False) when unset."""
    if s is None:
        return None, False
    s = str(s).strip()
    plus = s.endswith("+")
    return float(s.rstrip("+x")), plus
