"""The spot placer: where a replica of a spot service goes, and whether it goes on spot.

- Spread: a spot replica first avoids the regions the service's other live spot replicas
  are in, then only their zones, so one zone's preemption wave takes few replicas.
- Memory: zones that preempted one of the service's replicas in the last
  ``$SKYD_SERVE_PREEMPTION_MEMORY`` seconds (default 1800) are avoided; preemptions are
  rows of the `serve_preemptions` table, so a restarted daemon remembers them.
- On-demand: the first ``base_ondemand_fallback_replicas`` live replicas are on-demand;
  with ``dynamic_ondemand_fallback`` a replica whose spot launch finds no capacity
  anywhere (outside the recently preempted zones) launches on-demand instead.

`attempts()` gives the launches to try in order; the controller takes the first that
provisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skyd import settings
from skyd.jobs.ops import Block


@dataclass(frozen=True)
class Attempt:
    use_spot: bool
    blocked: tuple[Block, ...]
    why: str


def memory_s() -> float:
    return settings.SERVE_PREEMPTION_MEMORY.get()


def wants_spot(task: dict[str, Any]) -> bool:
    return any(bool(r.get("use_spot")) for r in task.get("resources") or [])


def with_spot(task: dict[str, Any], use_spot: bool) -> dict[str, Any]:
    """The task with every resources entry on spot (or on-demand)."""
    res = [{**r, "use_spot": use_spot} for r in task.get("resources") or [{}]]
    return {**task, "resources": res}


def attempts(task: dict[str, Any], policy: dict[str, Any], others: list[dict[str, Any]],
             preempted: list[tuple[str, str | None, str | None]]) -> list[Attempt]:
    """others: the service's other live replica rows; preempted: (cloud, region, zone) of
    recent preemptions."""
    if not wants_spot(task):
        return [Attempt(False, (), "on-demand task")]
    base = int(policy.get("base_ondemand_fallback_replicas") or 0)
    on_demand = sum(1 for r in others if r.get("use_spot") is not None and not r["use_spot"])
    if on_demand < base:
        return [Attempt(False, (), f"base_ondemand_fallback_replicas={base}")]
    bad = tuple(dict.fromkeys(Block(c, r, z) for c, r, z in preempted if z or r))
    spots = [r for r in others if r.get("use_spot") and r.get("cloud")]
    regions = tuple(dict.fromkeys(Block(r["cloud"], r["region"], None) for r in spots if r["region"]))
    zones = tuple(dict.fromkeys(Block(r["cloud"], r["region"], r["zone"]) for r in spots if r["zone"]))
    out: list[Attempt] = []
    for blocks, why in ((regions + bad, "spot, away from the other replicas' regions"),
                        (zones + bad, "spot, away from the other replicas' zones"),
                        (bad, "spot, away from recently preempted zones")):
        if not out or blocks != out[-1].blocked:
            out.append(Attempt(True, blocks, why))
    if policy.get("dynamic_ondemand_fallback"):
        out.append(Attempt(False, (), "dynamic_ondemand_fallback: no spot capacity"))
    elif bad:
        out.append(Attempt(True, (), "spot anywhere (no on-demand fallback)"))
    return out
