"""OPTIMIZE: from a Task to a ranked list of launchable choices, through the solver.

Which infras take part (decision recorded in docs/pipeline.md):
- clouds whose catalog is enabled (SKYD_CATALOG_DIR files, or credentials) AND that this
  build can provision (a registered Cloud); `--dryrun` plans over every enabled catalog;
- dynamic infras: `ssh` pools when configured, and `local` -- the embedded default, used
  when nothing else is enabled or when the task pins `infra: local`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skyd.clouds.base import ClusterHandle, get_cloud, registered_clouds
from skyd.clouds.offering import Offering
from skyd.errors import ClusterStateError, ResourcesUnavailableError
from skyd.solver.request import Block, DagRequest, ResourceRequest, TaskRequest

__all__ = ["Block", "Choice", "plan_task", "dryrun", "check_fits", "to_request"]


@dataclass(frozen=True)
class Choice:
    offering: Offering
    use_spot: bool
    hourly_cost: float  # whole cluster
    num_nodes: int

    def describe(self) -> str:
        o = self.offering
        loc = "/".join(p for p in (o.cloud, o.region, o.zone) if p)
        acc = f" {o.accelerator}:{_n(o.accelerator_count)}" if o.accelerator else ""
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


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _num(s: str | None) -> tuple[float | None, bool]:
    if s is None:
        return None, False
    s = str(s).strip()
    plus = s.endswith("+")
    return float(s.rstrip("+x")), plus


def to_request(task: Any) -> TaskRequest:
    cands = []
    for r in task.resources:
        acc = r.accelerator
        cpus, cplus = _num(r.cpus)
        mem, mplus = _num(r.memory)
        cands.append(
            ResourceRequest(
                cloud=r.cloud,
                region=r.region,
                zone=r.zone,
                instance_type=r.instance_type,
                accelerator=acc[0] if acc else None,
                accelerator_count=float(acc[1]) if acc else 0.0,
                cpus=cpus,
                cpus_plus=cplus,
                memory_gib=mem,
                memory_plus=mplus,
                use_spot=bool(r.use_spot),
            )
        )
    inputs = getattr(task, "inputs", None) or {}
    input_gb = float(next(iter(inputs.values()))) if inputs else 0.0
    input_cloud = None
    if inputs:
        uri = next(iter(inputs))
        input_cloud = {"s3": "aws", "gs": "gcp", "r2": "cloudflare"}.get(uri.split("://")[0])
    outputs = getattr(task, "outputs", None) or {}
    return TaskRequest(
        name=task.name or "task",
        candidates=cands or [ResourceRequest()],
        ordered=bool(getattr(task, "resources_ordered", False)),
        num_nodes=int(task.num_nodes or 1),
        estimated_runtime_s=getattr(task, "estimated_runtime", None),
        input_gb=input_gb,
        input_cloud=input_cloud,
        output_gb=float(next(iter(outputs.values()))) if outputs else 0.0,
    )


def _pins(tasks: list[Any]) -> set[str]:
    return {r.cloud for t in tasks for r in t.resources if r.cloud}


def _enabled_catalog_clouds(
    catalog: Any, *, launchable_only: bool, ok_clouds: set[str] | None = None
) -> set[str]:
    """Catalog clouds a plan may use: SKYD_CATALOG_DIR clouds (or credentialed ones), and
    for a real launch only those this build can provision (and whose check passed)."""
    import os

    enabled = set(catalog.enabled)
    if launchable_only:
        enabled &= set(registered_clouds()) if ok_clouds is None else ok_clouds
    elif ok_clouds is not None and not os.environ.get("SKYD_CATALOG_DIR"):
        # --dryrun: a cloud this build provisions (aws) is planned only with working
        # credentials, as a launch would; SKYD_CATALOG_DIR still names exactly what is planned.
        registered = set(registered_clouds())
        enabled = {c for c in enabled if c not in registered or c in ok_clouds}
    return enabled


def _catalog_for(
    tasks: list[Any], *, launchable_only: bool, ok_clouds: set[str] | None = None
) -> Any:
    """`ok_clouds`: the providers whose (cached) check passed; see skyd.pipeline.cloudcheck."""
    from skyd.clouds.catalog import load_catalog

    catalog = load_catalog()
    pins = _pins(tasks)
    registered = set(registered_clouds())
    for r in (r for t in tasks for r in t.resources):
        if r.cloud in registered:
            get_cloud(r.cloud).validate_location(r.region, r.zone)
    enabled = _enabled_catalog_clouds(catalog, launchable_only=launchable_only, ok_clouds=ok_clouds)
    extra: list[Offering] = []
    for name in registered_clouds():
        if name in catalog.clouds or name == "local":
            continue
        if ok_clouds is not None and name not in ok_clouds:
            continue
        cloud = get_cloud(name)
        offs = cloud.dynamic_offerings()
        if offs:
            extra.extend(offs)
    if "local" in pins or (not enabled and not extra):
        # `local`: the embedded default when nothing else is enabled, or when pinned.
        extra.extend(get_cloud("local").dynamic_offerings() or [])
    return catalog.with_enabled(enabled).with_extra(extra)


def _solve_dag(
    tasks: list[Any], edges: list[tuple[int, int]], blocked: list[Block], minimize: str,
    launchable_only: bool, ok_clouds: set[str] | None = None,
) -> list[Any]:
    from skyd.solver import optimize

    catalog = _catalog_for(tasks, launchable_only=launchable_only, ok_clouds=ok_clouds)
    dag = DagRequest(tasks=[to_request(t) for t in tasks], edges=list(edges))
    return list(optimize(dag, catalog, minimize=minimize, blocked=blocked))


def _solve(
    task: Any, blocked: list[Block], minimize: str, launchable_only: bool,
    ok_clouds: set[str] | None = None,
) -> list[Any]:
    return _solve_dag([task], [], blocked, minimize, launchable_only, ok_clouds)


async def _ok_clouds(store: Any | None) -> set[str]:
    """Providers whose check passed (cached in SQLite when there is a store)."""
    from skyd.pipeline import cloudcheck

    return cloudcheck.enabled(await cloudcheck.checks(store))


def _offerings_of(c: Any) -> list[tuple[Offering, bool, float]]:
    """A solver choice -> one launchable Offering per zone, in its failover order."""
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
        out.append((off, bool(c.use_spot), float(c.hourly_cost)))
    return out


def _hint_disabled_pins(err: ResourcesUnavailableError, task: Any, results: dict[str, Any]) -> None:
    """A task pinned to a provider whose check failed: the fix is the check's own answer
    (e.g. which credentials to set), not "relax the request"."""
    pinned = sorted({r.cloud for r in (task.resources or []) if getattr(r, "cloud", None)})
    failed = [(c, results[c].reason) for c in pinned if c in results and not results[c].ok]
    if failed:
        err.hint = "; ".join(f"{c} is disabled: {why}" for c, why in failed)


async def plan_task(
    task: Any, *, blocked: list[Block], minimize: str = "cost", store: Any | None = None
) -> list[Choice]:
    """Ranked launchable choices for one task, best first (zones expanded for failover).
    `store`: where the cloud checks are cached (probed now when missing or stale)."""
    import anyio

    from skyd.pipeline import cloudcheck

    results = await cloudcheck.checks(store)
    ok = cloudcheck.enabled(results)
    try:
        plans = await anyio.to_thread.run_sync(_solve, task, blocked, minimize, True, ok)
    except ResourcesUnavailableError as e:
        _hint_disabled_pins(e, task, results)
        raise
    choices: list[Choice] = []
    seen: set[tuple[Any, ...]] = set()
    for plan in plans:
        tp = plan.tasks[0]
        for cand in [tp.chosen, *tp.alternatives]:
            for off, spot, cost in _offerings_of(cand):
                key = (off.cloud, off.region, off.zone, off.instance_type, spot)
                if key in seen:
                    continue
                seen.add(key)
                choices.append(Choice(off, spot, cost, int(cand.num_nodes)))
    if not choices:
        raise ResourcesUnavailableError("no launchable resources", field="resources")
    return choices


async def dryrun(dag: Any, *, minimize: str = "cost", store: Any | None = None) -> dict[str, Any]:
    """The plan of a task or a whole DAG (a pipeline is solved as one chain, egress included),
    over every enabled catalog, launchable here or not."""
    import anyio

    from skyd.solver import format_plan_table, plan_to_json

    ok = await _ok_clouds(store)
    plans = await anyio.to_thread.run_sync(
        _solve_dag, list(dag.tasks), [tuple(e) for e in dag.edges], [], minimize, False, ok)
    out = plan_to_json(plans[0])
    out["table"] = format_plan_table(plans[0])
    out["dryrun"] = True
    return dict(out)


def block_for(choice: Choice, err: ResourcesUnavailableError) -> Block:
    """What a provisioning failure blocks: its declared scope (skyd.errors.FailoverScope);
    undeclared, the zone when there is one, else the region. ("stop" blocks the cloud: the
    launch ends anyway.)"""
    o = choice.offering
    scope = err.scope or ("zone" if o.zone else "region")
    if scope in ("cloud", "stop"):
        return Block(cloud=o.cloud)
    if scope == "region" or not o.zone:
        return Block(cloud=o.cloud, region=o.region)
    return Block(cloud=o.cloud, region=o.region, zone=o.zone)


def check_fits(task: Any, handle: ClusterHandle) -> None:
    """A task reusing a cluster must fit what the cluster has (any candidate)."""
    if task.num_nodes > handle.num_nodes:
        raise ClusterStateError(
            f"the task needs {task.num_nodes} nodes; cluster {handle.cluster_name!r} has"
            f" {handle.num_nodes}",
            hint="launch on a new cluster (-c NEWNAME) or lower num_nodes",
        )
    reasons = []
    for r in task.resources:
        if r.cloud and r.cloud != handle.cloud:
            reasons.append(f"infra {r.cloud} != {handle.cloud}")
            continue
        if r.region and handle.region and r.region != handle.region:
            reasons.append(f"region {r.region} != {handle.region}")
            continue
        acc = r.accelerator
        if acc:
            have = handle.accelerators.get(acc[0], 0)
            if have < float(acc[1]):
                reasons.append(f"{acc[0]}:{_n(float(acc[1]))} (cluster has {_fmt_accs(handle)})")
                continue
        return
    raise ClusterStateError(
        f"task does not fit cluster {handle.cluster_name!r}: " + "; ".join(reasons),
        hint="launch on a new cluster (-c NEWNAME), or change the task's resources",
    )


def _fmt_accs(handle: ClusterHandle) -> str:
    return ", ".join(f"{k}:{_n(v)}" for k, v in handle.accelerators.items()) or "no GPUs"


def cpu_demand(res: Any) -> float:
    """CPUs a job asks of its node: an explicit `cpus`, else 0.5 like SkyPilot's default."""
    if res is None or res.cpus is None:
        return 0.5
    v, _ = _num(res.cpus)
    return float(v or 0.5)


def _mounts(task: Any) -> dict[str, Any]:
    return dict(getattr(task, "file_mounts", None) or {})


def _kind(fm: Any) -> str:
    return str(getattr(fm, "kind", None) or (fm.get("kind") if isinstance(fm, dict) else "local"))


def _source(fm: Any) -> Any:
    if isinstance(fm, str):
        return fm
    return getattr(fm, "source", None) or (fm.get("source") if isinstance(fm, dict) else None)


def bucket_mounts(task: Any) -> dict[str, Any]:
    return {d: _source(fm) or getattr(fm, "name", "") for d, fm in _mounts(task).items() if _kind(fm) != "local"}


def local_mounts(task: Any) -> dict[str, str]:
    return {d: str(_source(fm)) for d, fm in _mounts(task).items() if _kind(fm) == "local"}


def workdir_path(task: Any) -> str:
    wd = task.workdir
    if isinstance(wd, str):
        return wd
    raise ClusterStateError("git workdirs ({url, ref}) are not supported yet", hint="use a local path")


def task_autostop(task: Any) -> tuple[int, bool] | None:
    for r in task.resources:
        a = getattr(r, "autostop", None)
        if a is not None and getattr(a, "enabled", True):
            return int(a.idle_minutes), bool(a.down)
    return None
