"""The one typed offer from the solver onward: a :class:`Placement`.

The solver ranks catalog rows for each of the task's resources entries (``any_of`` /
``ordered`` list several) and says which entry produced each choice (``request_index``).
From there on a launch carries one object, the Placement: the catalog row (zone resolved),
spot or not, the cluster's price, and the index of the entry it came from. What the node
gets from that entry -- disk, image (per region), labels, ports, the GPU vendor and count,
the CPUs a job asks -- is resolved once, by :meth:`Placement.resolved`, and read by every
consumer: the provision request (skyd.pipeline.provision.build_request), the task container
request and the agent's job spec (skyd.pipeline.jobspec). Nothing downstream guesses the
entry again (the any_of bug: the first entry's GPUs demanded of a node planned for another).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skyd.clouds.offering import Offering
from skyd.models.resources import DEFAULT_DISK_SIZE_GB  # "not asked for": the provider's default
from skyd.solver.request import fmt_count

if TYPE_CHECKING:
    from skyd.models.resources import Resources
    from skyd.models.task import Task


@dataclass(frozen=True)
class Resolved:
    """What the node gets from the task's resources entry a placement came from."""

    index: int  # the entry's position in task.resources
    disk_size: int | None  # GB; None: the provider's default (not asked for)
    image_id: str | None  # for the placement's region (a per-region map resolved); docker:... kept
    labels: tuple[tuple[str, str], ...]
    ports: tuple[str, ...]
    gpus: int  # GPUs a job asks of its node (the entry's count, rounded up)
    gpu_vendor: str | None  # "nvidia" | "amd" for the offering's accelerator, else None
    cpus: float  # CPUs a job asks of its node (SkyPilot's 0.5 when the entry names none)



def image_for(image: Any, region: str | None) -> str | None:
    """An entry's image_id for a region: a string as is; a per-region map's entry (or its
    only value); None when the map names neither."""
    if not image:
        return None
    if isinstance(image, str):
        return image
    if region in image:
        return str(image[region])
    vals = list(image.values())
    return str(vals[0]) if len(vals) == 1 else None


def cpu_demand(res: Resources | None) -> float:
    """CPUs a job asks of its node: an explicit `cpus`, else 0.5 like SkyPilot's default."""
    if res is None or res.cpus is None:
        return 0.5
    s = str(res.cpus).strip().rstrip("+x")
    return float(s or 0.5) or 0.5


def gpu_demand(res: Resources | None) -> int:
    if res is None or not res.accelerators:
        return 0
    return math.ceil(float(next(iter(res.accelerators.values()))))


def gpu_vendor(accelerator: str | None) -> str | None:
    if not accelerator:
        return None
    from skyd.models.accelerators import get_accelerator_info

    info = get_accelerator_info(accelerator)
    return info.vendor if info is not None and info.vendor in ("nvidia", "amd") else None


def resolve_entry(entry: Resources | None, index: int, *, region: str | None = None,
                  accelerator: str | None = None) -> Resolved:
    """The node-facing facts of one resources entry (``region``/``accelerator``: the
    placement's, for a per-region image and the GPU vendor)."""
    disk = getattr(entry, "disk_size", None) if entry is not None else None
    return Resolved(
        index=index,
        disk_size=int(disk) if disk and int(disk) != DEFAULT_DISK_SIZE_GB else None,
        image_id=image_for(getattr(entry, "image_id", None), region),
        labels=tuple(sorted((getattr(entry, "labels", None) or {}).items())),
        ports=tuple(str(p) for p in (getattr(entry, "ports", None) or ())),
        gpus=gpu_demand(entry),
        gpu_vendor=gpu_vendor(accelerator),
        cpus=cpu_demand(entry),
    )


@dataclass(frozen=True)
class Placement:
    """One launchable placement of a task: a catalog row (zone resolved), spot or not, the
    whole cluster's price, and the task's resources entry it came from."""

    offering: Offering
    use_spot: bool
    hourly_cost: float  # whole cluster
    num_nodes: int
    resources_index: int = 0  # the task's resources entry (any_of/ordered) it came from

    def describe(self) -> str:
        o = self.offering
        loc = "/".join(p for p in (o.cloud, o.region, o.zone) if p)
        acc = f" {o.accelerator}:{fmt_count(o.accelerator_count)}" if o.accelerator else ""
        spot = " [spot]" if self.use_spot else ""
        nodes = f" x{self.num_nodes}" if self.num_nodes > 1 else ""
        return f"{loc} {o.instance_type}{acc}{spot}{nodes} (${self.hourly_cost:.2f}/h)"

    def public(self) -> dict[str, Any]:
        o = self.offering
        return {
            "cloud": o.cloud,
            "region": o.region,
            "zone": o.zone,
            "instance_type": o.instance_type,
            "accelerators": {o.accelerator: o.accelerator_count} if o.accelerator else {},
            "cpus": o.vcpus,
            "memory_gib": o.memory_gib,
            "use_spot": self.use_spot,
            "hourly_cost": self.hourly_cost,
            "num_nodes": self.num_nodes,
        }

    def entry(self, task: Task) -> Resources | None:
        """The task's resources entry this placement came from: the solver's index; a
        placement made without one (index out of range, or an entry pinned to another
        infra) falls back to the first entry for its infra, then the first unpinned one."""
        res = list(task.resources or [])
        idx = self.resources_index
        if 0 <= idx < len(res) and (not res[idx].cloud or res[idx].cloud == self.offering.cloud):
            return res[idx]
        for r in res:
            if r.cloud == self.offering.cloud:
                return r
        for r in res:
            if not r.cloud:
                return r
        return res[0] if res else None

    def resolved(self, task: Task) -> Resolved:
        """What the node gets: the entry's disk, image, labels, ports, GPUs and CPUs."""
        entry = self.entry(task)
        res = list(task.resources or [])
        index = next((i for i, r in enumerate(res) if r is entry), 0)
        return resolve_entry(entry, index, region=self.offering.region,
                             accelerator=self.offering.accelerator)


def placements_of(c: Any) -> list[Placement]:
    """A solver choice (skyd.solver.plan.Choice) -> one Placement per zone, in its failover
    order, each knowing the resources entry the solver took it from."""
    acc = next(iter(c.accelerators.items()), None) if c.accelerators else None
    per_node = c.hourly_cost / max(1, c.num_nodes)
    zones = list(getattr(c, "zones", None) or [c.zone])
    out = []
    for z in zones:
        off = Offering(
            cloud=c.cloud,
            instance_type=c.instance_type,
            accelerator=acc[0] if acc else None,
            accelerator_count=float(acc[1]) if acc else 0.0,
            vcpus=float(c.vcpus or 0),
            memory_gib=float(c.memory_gib or 0),
            region=c.region,
            zone=z,
            price=None if c.use_spot else per_node,
            spot_price=per_node if c.use_spot else None,
        )
        out.append(Placement(off, bool(c.use_spot), float(c.hourly_cost), int(c.num_nodes),
                             int(getattr(c, "request_index", 0))))
    return out
