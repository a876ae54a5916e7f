"""Candidate enumeration: a task's resource requests x enabled clouds -> launchable rows.

Each launchable is one (cloud, region, instance type, spot) with its zones ordered by price
(the cheapest zone is the candidate's ``zone``; the rest are the provisioner's in-region
failover order). Every request that yields nothing keeps the reason, and the
"no resources" error names it and the nearest fits.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from skyd.clouds.catalog import IMPLEMENTED, Catalog
from skyd.clouds.offering import Offering
from skyd.errors import ResourcesUnavailableError
from skyd.solver.request import Block, ResourceRequest, TaskRequest, fmt_count

DEFAULT_CPUS = 8.0  # no cpus/memory/accelerator given: SkyPilot's default "8+" vCPUs ...
DEFAULT_MEM_PER_CPU = 4.0  # ... with at least 4 GiB per vCPU


@dataclass(frozen=True, slots=True)
class Candidate:
    cloud: str
    region: str
    zone: str | None
    zones: tuple[str, ...]  # all zones in the region offering it, cheapest first
    instance_type: str
    accelerator: str | None
    accelerator_count: float
    vcpus: float
    memory_gib: float
    use_spot: bool
    price: float  # $/h for one node
    num_nodes: int
    request_index: int  # which ResourceRequest of the task produced it

    @property
    def hourly_cost(self) -> float:
        return self.price * self.num_nodes

    @property
    def loc(self) -> tuple[str, str]:
        return (self.cloud, self.region)

    @property
    def accelerators(self) -> dict[str, float]:
        return {self.accelerator: self.accelerator_count} if self.accelerator else {}


@dataclass
class TaskCandidates:
    task: TaskRequest
    candidates: list[Candidate]
    reasons: list[str]  # why requests (or parts of them) produced nothing


def _clouds_str(rows: Sequence[Offering], limit: int = 6) -> str:
    seen: list[str] = []
    for o in rows:
        if o.cloud not in seen:
            seen.append(o.cloud)
    s = ", ".join(seen[:limit])
    return s + (", …" if len(seen) > limit else "")


def _regions_str(rows: Sequence[Offering], per_cloud: int = 3) -> str:
    """``aws (us-east-1, us-west-2, +15 more), gcp (...)``: cheapest regions per cloud."""
    by_cloud: dict[str, list[str]] = {}
    for o in sorted(rows, key=lambda o: (o.price if o.price is not None else 1e18)):
        regs = by_cloud.setdefault(o.cloud, [])
        if o.region not in regs:
            regs.append(o.region)
    parts = []
    for cloud, regs in sorted(by_cloud.items()):
        more = f", +{len(regs) - per_cloud} more" if len(regs) > per_cloud else ""
        parts.append(f"{cloud} ({', '.join(regs[:per_cloud])}{more})")
    return ", ".join(parts)


def _blocked(o: Offering, spot: bool, blocks: Sequence[Block]) -> bool:
    for b in blocks:
        if (
            b.cloud == o.cloud
            and (b.region is None or b.region == o.region)
            and (b.zone is None or b.zone == o.zone)
            and (b.instance_type is None or b.instance_type == o.instance_type)
            and (b.use_spot is None or b.use_spot == spot)
        ):
            return True
    return False


def _source_rows(req: ResourceRequest, cat: Catalog) -> tuple[Sequence[Offering], str | None]:
    """Rows matching the request's instance type / accelerator / CPU shape, any cloud."""
    if req.accelerator:
        acc = cat.canonical_accelerator(req.accelerator)
        if acc is None:
            near = difflib.get_close_matches(req.accelerator, cat.accelerator_names(), n=4, cutoff=0.4)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            return (), f"unknown accelerator {req.accelerator!r}{hint}"
        count = float(req.accelerator_count or 1.0)
        rows: Sequence[Offering] = cat.by_accelerator(acc, count)
        if req.instance_type:
            rows = [o for o in rows if o.instance_type == req.instance_type]
            if not rows:
                have = cat.by_instance_type(req.instance_type)
                if not have:
                    return (), _unknown_type(req.instance_type, cat)
                o = have[0]
                what = f"{o.accelerator}:{fmt_count(o.accelerator_count)}" if o.accelerator else "no accelerator"
                return (), f"instance type {req.instance_type} has {what}, not {acc}:{fmt_count(count)}"
        if not rows:
            all_rows = cat.by_accelerator(acc)
            counts = sorted({o.accelerator_count for o in all_rows})
            largest = counts[-1]
            top = [o for o in all_rows if o.accelerator_count == largest]
            return (), (
                f"no instance has {fmt_count(count)} {acc}; offered counts: "
                f"{', '.join(fmt_count(c) for c in counts)}; the largest is {fmt_count(largest)} ({_clouds_str(top)})"
            )
        return rows, None
    if req.instance_type:
        rows = cat.by_instance_type(req.instance_type)
        if not rows:
            return (), _unknown_type(req.instance_type, cat)
        return rows, None
    if req.cpus is None and req.memory_gib is None:
        rows = [o for o in cat.cpu_only(DEFAULT_CPUS) if o.memory_gib >= DEFAULT_MEM_PER_CPU * o.vcpus]
        # Dynamic infras (local, ssh hosts, k8s nodes) have no "default instance type":
        # any node of theirs runs a task that asks for nothing in particular.
        rows += [o for c in _dynamic_clouds(cat) for o in cat.by_cloud(c)]
        return rows, None if rows else "no CPU-only instance with 8+ vCPUs and 4+ GiB per vCPU"
    if req.cpus is not None:
        rows = cat.cpu_only(req.cpus, exact=not req.cpus_plus)
        if req.memory_gib is None:
            # SkyPilot's default instance for `cpus: N` without memory: 4 GiB per vCPU
            # (AWS: m6i/r6i, not the cheaper 2 GiB c6i), so the same YAML costs the same.
            dyn = set(_dynamic_clouds(cat))
            rows = [o for o in rows
                    if o.cloud in dyn or o.memory_gib >= DEFAULT_MEM_PER_CPU * o.vcpus]
        return rows, None
    return cat.cpu_only(0.0), None


def _dynamic_clouds(cat: Catalog) -> list[str]:
    out = []
    for c in cat.clouds:
        src = cat.source(c)
        if src is not None and src.kind == "dynamic":
            out.append(c)
    return out


def _unknown_type(it: str, cat: Catalog) -> str:
    names = {o.instance_type for c in cat.clouds for o in cat.by_cloud(c)}
    near = difflib.get_close_matches(it, sorted(names), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return f"no instance type {it!r} in any catalog{hint}"


def launchables(
    req: ResourceRequest,
    num_nodes: int,
    cat: Catalog,
    enabled: Collection[str],
    blocked: Sequence[Block] = (),
    request_index: int = 0,
) -> tuple[list[Candidate], str | None]:
    """All launchable candidates for one request, or ([], reason)."""
    if req.cloud is not None:
        if req.cloud not in cat.clouds:
            return [], f"unknown cloud {req.cloud!r} (known: {', '.join(cat.clouds)})"
        if req.cloud not in enabled:
            why = "no credentials or not enabled" if IMPLEMENTED.get(req.cloud, True) else (
                "catalog only: skyd has no provider for it yet")
            return [], f"cloud {req.cloud!r} is not enabled ({why}); enabled: {', '.join(sorted(enabled))}"
    rows, reason = _source_rows(req, cat)
    if reason is not None:
        return [], reason
    if not rows:
        return [], "no CPU-only instance matches"
    spot = bool(req.use_spot)
    cpus, mem = req.cpus, req.memory_gib
    stages: list[tuple[Callable[[Offering], bool], Callable[[Sequence[Offering]], str]]] = []
    if req.cloud is not None:
        stages.append((lambda o: o.cloud == req.cloud,
                       lambda r: f"not offered on {req.cloud}; offered on: {_clouds_str(r)}"))
    stages.append((lambda o: o.cloud in enabled,
                   lambda r: f"offered only on clouds that are not enabled: {_clouds_str(r)}"))
    if req.region is not None:
        stages.append((lambda o: o.region == req.region,
                       lambda r: f"not offered in region {req.region}; offered in: {_regions_str(r)}"))
    if req.zone is not None:
        stages.append((lambda o: o.zone == req.zone,
                       lambda r: f"not offered in zone {req.zone}; zones: "
                       + ", ".join(sorted({str(o.zone) for o in r})[:8])))
    if cpus is not None and (req.accelerator or req.instance_type):
        if req.cpus_plus:
            stages.append((lambda o: o.vcpus >= cpus,
                           lambda r: f"needs {fmt_count(cpus)}+ vCPUs; the most offered is {fmt_count(max(o.vcpus for o in r))}"))
        else:
            stages.append((lambda o: o.vcpus == cpus,
                           lambda r: f"needs exactly {fmt_count(cpus)} vCPUs; offered: "
                           + ", ".join(fmt_count(v) for v in sorted({o.vcpus for o in r}))))
    if mem is not None:
        if req.memory_plus:
            stages.append((lambda o: o.memory_gib >= mem,
                           lambda r: f"needs {fmt_count(mem)}+ GiB memory; the most offered is "
                           f"{fmt_count(max(o.memory_gib for o in r))} GiB"))
        else:
            stages.append((lambda o: o.memory_gib == mem,
                           lambda r: f"needs exactly {fmt_count(mem)} GiB memory; offered: "
                           + ", ".join(fmt_count(v) for v in sorted({o.memory_gib for o in r})[:8])))
    stages.append((lambda o: o.hourly(spot) is not None,
                   lambda r: ("no spot offering (on-demand only here)" if spot
                              else "no on-demand offering (spot only here)")))
    if blocked:
        stages.append((lambda o: not _blocked(o, spot, blocked),
                       lambda r: f"all {len(r)} matching offerings are blocked (failed provisioning)"))
    for pred, explain in stages:
        kept = [o for o in rows if pred(o)]
        if not kept:
            return [], explain(rows)
        rows = kept
    # Group zones: one candidate per (cloud, region, instance type).
    groups: dict[tuple[str, str, str], list[Offering]] = {}
    for o in rows:
        groups.setdefault((o.cloud, o.region, o.instance_type), []).append(o)
    out: list[Candidate] = []
    for (cloud, region, itype), grp in groups.items():
        grp.sort(key=lambda o: o.hourly(spot) or 0.0)
        best = grp[0]
        zones = tuple(dict.fromkeys(o.zone for o in grp if o.zone))
        out.append(Candidate(
            cloud, region, best.zone, zones, itype, best.accelerator, best.accelerator_count,
            best.vcpus, best.memory_gib, spot, float(best.hourly(spot) or 0.0), num_nodes,
            request_index,
        ))
    out.sort(key=lambda c: c.price)
    return out, None


def enumerate_task(
    task: TaskRequest, cat: Catalog, enabled: Collection[str] | None = None, blocked: Sequence[Block] = ()
) -> TaskCandidates:
    """Launchable candidates of one task; raises ResourcesUnavailableError with the reasons."""
    en = cat.enabled if enabled is None else enabled
    reasons: list[str] = []
    found: dict[tuple[str, str, str, bool], Candidate] = {}
    reqs = task.candidates or [ResourceRequest()]
    for i, req in enumerate(reqs):
        cands, why = launchables(req, max(1, task.num_nodes), cat, en, blocked, i)
        if why is not None:
            reasons.append(f"{req.describe()} — {why}")
            continue
        for c in cands:
            found.setdefault((c.cloud, c.region, c.instance_type, c.use_spot), c)
        if task.ordered and found:
            break
    if not found:
        head = f"no launchable resources for task {task.name!r}"
        raise ResourcesUnavailableError(
            head + ": " + "; ".join(reasons),
            field="resources",
            hint="relax the request (another accelerator count, region or cloud), enable more "
            "clouds, or check `skyd show-gpus`",
        )
    return TaskCandidates(task, sorted(found.values(), key=lambda c: c.price), reasons)
