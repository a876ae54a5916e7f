"""Plans: what the optimizer returns, as data, JSON and SkyPilot-like text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skyd.solver.candidates import Candidate


@dataclass(frozen=True)
class Choice:
    cloud: str
    region: str
    zone: str | None
    zones: tuple[str, ...]  # in-region failover order, cheapest first
    instance_type: str
    accelerators: dict[str, float]
    use_spot: bool
    hourly_cost: float  # USD/h for all nodes
    num_nodes: int
    vcpus: float
    memory_gib: float
    runtime_s: float  # the runtime estimate used for this choice
    request_index: int = 0  # which of the task's resources entries produced it

    @classmethod
    def of(cls, c: Candidate, runtime_s: float) -> Choice:
        return cls(c.cloud, c.region, c.zone, c.zones, c.instance_type, c.accelerators,
                   c.use_spot, c.hourly_cost, c.num_nodes, c.vcpus, c.memory_gib, runtime_s,
                   c.request_index)

    def to_json(self) -> dict[str, Any]:
        return {
            "cloud": self.cloud,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "accelerators": {k: _num(v) for k, v in self.accelerators.items()},
            "use_spot": self.use_spot,
            "hourly_cost": round(self.hourly_cost, 6),
            "num_nodes": self.num_nodes,
        }


@dataclass
class TaskPlan:
    name: str
    chosen: Choice
    alternatives: list[Choice] = field(default_factory=list)


@dataclass
class Plan:
    objective: str  # "cost" | "time"
    tasks: list[TaskPlan]
    total_hourly_cost: float
    objective_value: float  # USD (cost) or seconds (time, the makespan)
    total_cost: float  # USD over the runtime estimates, egress included
    makespan_s: float
    rank: int = 0  # 0 = best


def _num(v: float) -> float | int:
    return int(v) if float(v).is_integer() else v


def plan_to_json(plan: Plan) -> dict[str, Any]:
    return {
        "objective": plan.objective,
        "tasks": [
            {"name": t.name, "chosen": t.chosen.to_json(),
             "alternatives": [a.to_json() for a in t.alternatives]}
            for t in plan.tasks
        ],
        "total_hourly_cost": round(plan.total_hourly_cost, 6),
        "objective_value": round(plan.objective_value, 6),
        "estimated_cost": round(plan.total_cost, 6),
        "estimated_makespan_s": round(plan.makespan_s, 3),
    }


def _acc(c: Choice) -> str:
    if not c.accelerators:
        return "-"
    return ", ".join(f"{k}:{_num(v)}" for k, v in c.accelerators.items())


def plan_row(c: Choice, mark: str) -> list[str]:
    infra = f"{c.cloud} ({c.region}{', ' + c.zone if c.zone else ''})"
    nodes = f"{c.num_nodes}x " if c.num_nodes > 1 else ""
    return [
        infra,
        nodes + c.instance_type + (" [Spot]" if c.use_spot else ""),
        f"{_num(c.vcpus)}" if c.vcpus else "-",
        f"{_num(c.memory_gib)}" if c.memory_gib else "-",
        _acc(c),
        f"$ {c.hourly_cost:.2f}",
        mark,
    ]


def format_plan_table(plan: Plan) -> str:
    """Plain-text plan, like SkyPilot's optimizer output (chosen row marked with ✔)."""
    what = "cost ($)" if plan.objective == "cost" else "time (s)"
    lines: list[str] = []
    header = ["INFRA", "INSTANCE", "vCPUs", "Mem(GB)", "GPUS", "COST ($/h)", "CHOSEN"]
    for t in plan.tasks:
        rows = [plan_row(t.chosen, "✔")] + [plan_row(a, "") for a in t.alternatives]
        widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]
        lines.append(f"Considered resources for task {t.name!r} (sorted by {what}):")
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
        for r in rows:
            lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        lines.append("")
    if plan.objective == "cost":
        lines.append(f"Total: $ {plan.total_hourly_cost:.2f}/h; estimated cost $ {plan.total_cost:.2f} "
                     "(runtime estimates + egress)")
    else:
        lines.append(f"Total: $ {plan.total_hourly_cost:.2f}/h; estimated makespan "
                     f"{plan.makespan_s:.0f} s, cost $ {plan.total_cost:.2f}")
    return "\n".join(lines)
