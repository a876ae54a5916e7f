"""OPTIMIZE: from a Task to a ranked list of launchable choices, through the solver.

One planning function, :func:`plan_dag`, serves `launch` and `--dryrun` alike (decision
recorded in docs/pipeline.md). It solves twice over the same rows:
- the launch plan, over what can launch now: clouds whose catalog is enabled
  (SKYD_CATALOG_DIR files, or credentials) AND that this build can provision (a registered
  Cloud), plus dynamic infras: `ssh` pools when configured, and `local` -- the embedded
  default, used when nothing else is enabled or when the task pins `infra: local`;
- the wide view, over every catalog, shown beside it with how to enable each infra.
`launch` runs the launch plan's choice; `--dryrun` shows that same choice, marked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skyd.clouds.base import get_cloud, registered_clouds
from skyd.clouds.offering import Offering
from skyd.errors import InvalidSpecError, ResourcesUnavailableError
from skyd.pipeline.placement import Placement, cpu_demand, placements_of
from skyd.solver.request import Block, DagRequest, ResourceRequest, TaskRequest, parse_count

if TYPE_CHECKING:
    from skyd.models.task import Task

__all__ = ["Block", "Choice", "Placement", "Planned", "RankedChoices", "plan_dag", "plan_task",
           "dryrun", "cpu_demand", "to_request"]


#: The one typed offer from the solver onward (skyd.pipeline.placement); `Choice` is its
#: name in the planner's vocabulary.
Choice = Placement



def to_request(task: Task) -> TaskRequest:
    cands = []
    for r in task.resources:
        acc = r.accelerator
        cpus, cplus = parse_count(r.cpus)
        mem, mplus = parse_count(r.memory)
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


def _pins(tasks: list[Task]) -> set[str]:
    return {r.cloud for t in tasks for r in t.resources if r.cloud}


def allowed_clouds(pins: set[str] | None = None) -> set[str] | None:
    """The config's ``allowed_clouds`` (None: every infra). A task pinned to an infra the
    config does not allow is refused, naming the key."""
    from skyd import config

    allowed = config.current().allowed_clouds()
    if allowed is None:
        return None
    for pin in sorted(pins or ()):
        if pin not in allowed:
            raise InvalidSpecError(
                f"infra {pin!r} is not in allowed_clouds ({', '.join(sorted(allowed))})",
                field="resources.infra",
                hint="add it to allowed_clouds in your config, or pick an allowed infra")
    return allowed


def _enabled_catalog_clouds(
    catalog: Any, *, launchable_only: bool, ok_clouds: set[str] | None = None
) -> set[str]:
    """Catalog clouds a plan may use: SKYD_CATALOG_DIR clouds (or credentialed ones), and
    for a real launch only those this build can provision (and whose check passed)."""
    enabled = set(catalog.enabled)
    if launchable_only:
        enabled &= set(registered_clouds()) if ok_clouds is None else ok_clouds
    return enabled


def catalog_at(catalog_dir: str | None) -> Any:
    from pathlib import Path

    from skyd.clouds.catalog import load_catalog
    from skyd.errors import InvalidSpecError

    if catalog_dir and not Path(catalog_dir).is_dir():
        raise InvalidSpecError(f"SKYD_CATALOG_DIR {catalog_dir!r} is not a directory",
                               field="SKYD_CATALOG_DIR",
                               hint="point it at a directory of <cloud>.csv files, or unset it")
    return load_catalog(catalog_dir or None)


def _catalog_for(tasks: list[Task], *, launchable_only: bool, catalog_dir: str | None = None,
                 ok_clouds: set[str] | None = None) -> Any:
    """`ok_clouds`: the providers whose (cached) check passed (skyd.pipeline.cloudcheck);
    None: check them now."""
    return _catalog_and_fingerprint(tasks, launchable_only=launchable_only,
                                    catalog_dir=catalog_dir, ok_clouds=ok_clouds)[0]


def _catalog_and_fingerprint(tasks: list[Task], *, launchable_only: bool,
                             catalog_dir: str | None = None,
                             ok_clouds: set[str] | None = None) -> tuple[Any, str]:
    """The catalog a plan is solved over, and its fingerprint (skyd.pipeline.plancache)."""
    from skyd.pipeline import plancache

    base = catalog_at(catalog_dir)
    catalog = base
    pins = _pins(tasks)
    allowed = allowed_clouds(pins)
    registered = set(registered_clouds())
    for r in (r for t in tasks for r in t.resources):
        if r.cloud in registered:
            get_cloud(r.cloud).validate_location(r.region, r.zone)
    enabled = _enabled_catalog_clouds(catalog, launchable_only=launchable_only, ok_clouds=ok_clouds)
    if allowed is not None:
        enabled &= allowed
    extra: list[Offering] = []
    for name in registered_clouds():
        if name in catalog.clouds or name == "local" or (allowed is not None and name not in allowed):
            continue
        cloud = get_cloud(name)
        if not (name in ok_clouds if ok_clouds is not None else _check_now(cloud)):
            continue
        offs = cloud.dynamic_offerings()
        if offs:
            extra.extend(offs)
    if "local" in pins or (not enabled and not extra and (allowed is None or "local" in allowed)):
        # `local`: the embedded default when nothing else is enabled, or when pinned.
        extra.extend(get_cloud("local").dynamic_offerings() or [])
    out = catalog.with_enabled(enabled).with_extra(extra)
    return out, plancache.fingerprint(out, base, extra)


def _capacity_blocks(tasks: list[Task]) -> tuple[list[Block], list[str]]:
    """Infras that can never hold a task's num_nodes (e.g. `local`: what this machine can
    run) are blocked for the plan; the reasons name them."""
    blocks: list[Block] = []
    why: list[str] = []
    for name in registered_clouds():
        cap = get_cloud(name).max_nodes()
        big = max((int(t.num_nodes or 1) for t in tasks), default=1)
        if cap is not None and big > cap:
            blocks.append(Block(cloud=name))
            why.append(f"{name} holds at most {cap} node(s)")
    return blocks, why


def _check_result(cloud: Any) -> tuple[bool, str]:
    """``cloud.check()`` from synchronous code (a worker thread of the loop, or none)."""
    import anyio
    import anyio.from_thread

    try:
        ok, reason = anyio.from_thread.run(cloud.check)
    except RuntimeError:  # not in a worker thread: no loop to borrow
        ok, reason = anyio.run(cloud.check)
    return bool(ok), str(reason)


def _check_now(cloud: Any) -> bool:
    return _check_result(cloud)[0]


def check_capacity(task: Task) -> None:
    """Cheap submit-time form of the plan-time check: when no infra this task may use
    (its pinned infra, else every enabled one) can ever hold num_nodes, InvalidSpecError.
    Infras that do not know their limit (None) pass; the plan decides for them."""
    n = int(task.num_nodes or 1)
    caps: list[int | None] = []
    enabled = None
    for r in task.resources:
        if r.cloud:
            if r.cloud not in registered_clouds():
                return  # planned from a catalog: the provider decides
            caps.append(get_cloud(r.cloud).max_nodes())
            continue
        if enabled is None:
            enabled = [get_cloud(c) for c in registered_clouds() if _check_now(get_cloud(c))]
        caps.extend(c.max_nodes() for c in enabled)
    if not caps or any(c is None or n <= c for c in caps):
        return
    raise InvalidSpecError(
        f"num_nodes {n} is more than any infra here can hold (at most {max(c or 0 for c in caps)})",
        field="num_nodes", hint="lower num_nodes, or use an infra with room for it",
    )


def checked_clouds(tasks: list[Task]) -> set[str] | None:
    """The providers a plan of ``tasks`` asks about: when every resource entry names its
    infra, those infras only (a task pinned to `local` never probes AWS credentials); else
    every provider (None)."""
    entries = [r for t in tasks for r in t.resources]
    if not entries or any(not r.cloud for r in entries):
        return None
    return _pins(tasks) & set(registered_clouds())


async def _checks(store: Any | None, tasks: list[Task]) -> dict[str, Any]:
    """The check result of every provider a plan of ``tasks`` may use (cached in SQLite when
    there is a store)."""
    from skyd.pipeline import cloudcheck

    return await cloudcheck.checks(store, checked_clouds(tasks))


def _ok(checks: dict[str, Any] | None) -> set[str] | None:
    return None if checks is None else {n for n, r in checks.items() if r.ok}


def how_to_enable(cloud: str, checks: dict[str, Any] | None = None) -> str:
    """What makes ``cloud`` launchable here: the config or credential to set, or why not.
    ``checks``: the providers' (cached) check results, else the check runs now."""
    from skyd.clouds.catalog import IMPLEMENTED

    if cloud in registered_clouds():
        if checks is not None and cloud in checks:
            return "" if checks[cloud].ok else str(checks[cloud].reason)
        ok, reason = _check_result(get_cloud(cloud))
        return "" if ok else reason
    if not IMPLEMENTED.get(cloud, False):
        return (f"catalog only: no {cloud} provider in this build yet (no credential enables "
                "it); its prices are shown to compare")
    return f"no {cloud} credentials found"


@dataclass
class Planned:
    """What :func:`plan_dag` returns: the launch plan and the wide view beside it."""

    plans: list[Any]  # ranked solver plans over what can launch now; [] when nothing can
    error: ResourcesUnavailableError | None  # why nothing can launch now (plans == [])
    wide: list[Any]  # the same DAG over every catalog; [] when nothing fits anywhere
    launchable: frozenset[str]  # infras that can launch now
    how: dict[str, str] = field(default_factory=dict)  # infra -> how to enable it
    fingerprint: str = ""  # what it was solved over (skyd.pipeline.plancache)

    def best(self) -> Any:
        """The plan launch runs (or, when nothing can launch now, the wide view's best)."""
        return self.plans[0] if self.plans else (self.wide[0] if self.wide else None)


def plan_dag(
    tasks: list[Task], edges: list[tuple[int, int]], blocked: list[Block], minimize: str,
    catalog_dir: str | None = None, checks: dict[str, Any] | None = None,
) -> Planned:
    """The one planning function of `launch` and `--dryrun` (sync: run it in a thread).
    ``checks``: the providers' (cached) check results; only those that pass launch."""
    from skyd.solver import optimize

    dag = DagRequest(tasks=[to_request(t) for t in tasks], edges=list(edges))
    catalog, fp = _catalog_and_fingerprint(tasks, launchable_only=True, catalog_dir=catalog_dir,
                                           ok_clouds=_ok(checks))
    launchable = frozenset(catalog.enabled)
    plans: list[Any] = []
    error: ResourcesUnavailableError | None = None
    cap_blocks, why = _capacity_blocks(tasks)
    try:
        plans = list(optimize(dag, catalog, minimize=minimize, blocked=[*blocked, *cap_blocks]))
    except ResourcesUnavailableError as e:
        if why:
            big = max(int(t.num_nodes or 1) for t in tasks)
            raise InvalidSpecError(
                f"num_nodes {big} is more than any infra here can hold: " + "; ".join(why),
                field="num_nodes", hint="lower num_nodes, or use an infra with room for it",
            ) from None
        error = e
    allowed = allowed_clouds(_pins(tasks))
    wide_cat = catalog.with_enabled({c for c in catalog.clouds if allowed is None or c in allowed})
    try:
        wide = list(optimize(dag, wide_cat, minimize=minimize, max_plans=1))
    except ResourcesUnavailableError:
        wide = []
    shown = {c.cloud for p in plans[:1] + wide[:1] for t in p.tasks for c in [t.chosen, *t.alternatives]}
    how = {c: how_to_enable(c, checks) for c in sorted(shown - launchable)}
    # Infras this build can provision but that are not set up (ssh pools, credentials):
    # what to configure, even when no catalog row of theirs shows (they have none yet).
    asked = checked_clouds(tasks)
    for name in registered_clouds():
        if asked is not None and name not in asked:
            continue
        if name not in launchable and name not in how and (allowed is None or name in allowed):
            reason = how_to_enable(name, checks)
            if reason:
                how[name] = reason
    return Planned(plans, error, wide, launchable, how, fp)


class RankedChoices(list[Placement]):
    """Launchable placements, best first, with the plan table that shows them (``table``),
    the plan's id (skyd.pipeline.plancache) and whether a shown plan was reused."""

    table: str = ""
    plan_id: str = ""
    reused: bool = False
    replanned: str = ""  # why a plan the caller named was not reused ("" when none was named)

    def copy_as(self, *, reused: bool, replanned: str = "") -> RankedChoices:
        out = RankedChoices(self)
        out.table, out.plan_id, out.reused, out.replanned = self.table, self.plan_id, reused, replanned
        return out


async def _add_check_reasons(e: ResourcesUnavailableError, task: Task, ok: set[str],
                             store: Any | None) -> None:
    """A task pinned to providers whose check failed: say why each failed (the check's own
    reason names the fix, e.g. which credentials are missing) in the error's hint."""
    from skyd.pipeline import cloudcheck

    pinned = {r.cloud for r in (getattr(task, "resources", None) or []) if getattr(r, "cloud", None)}
    failed = sorted((pinned & set(registered_clouds())) - ok)
    if not failed:
        return
    results = await cloudcheck.checks(store, failed)
    why = "; ".join(f"{c}: {results[c].reason}" for c in failed if c in results and results[c].reason)
    if why:
        e.hint = why + (f"; {e.hint}" if e.hint else "")


def _ranked(planned: Planned) -> RankedChoices:
    """The launch plan's placements, best first (zones expanded for failover; each row once)."""
    choices = RankedChoices()
    seen: set[tuple[Any, ...]] = set()
    for plan in planned.plans:
        tp = plan.tasks[0]
        for cand in [tp.chosen, *tp.alternatives]:
            for p in placements_of(cand):
                off = p.offering
                key = (off.cloud, off.region, off.zone, off.instance_type, p.use_spot)
                if key in seen:
                    continue
                seen.add(key)
                choices.append(p)
    return choices


def _fingerprint_now(task: Task, catalog_dir: str | None, checks: dict[str, Any]) -> str:
    return _catalog_and_fingerprint([task], launchable_only=True, catalog_dir=catalog_dir,
                                    ok_clouds=_ok(checks))[1]


async def _shown_plan(task: Task, shown: str, pid: str, catalog_dir: str | None,
                      checks: dict[str, Any]) -> tuple[RankedChoices | None, str]:
    """The plan a dry run showed under ``shown`` when it still holds for this task; else
    (None, why it is planned again)."""
    import anyio

    from skyd.pipeline import plancache

    if shown != pid:
        return None, "the task or its options differ from the plan shown"
    fp = await anyio.to_thread.run_sync(_fingerprint_now, task, catalog_dir, checks)
    got, why = plancache.recall(shown, fp)
    return (got.copy_as(reused=True) if got is not None else None), why


async def plan_task(task: Task, *, blocked: list[Block], minimize: str = "cost",
                    catalog_dir: str | None = None, store: Any | None = None,
                    shown: str | None = None) -> RankedChoices:
    """Ranked launchable placements for one task, best first (zones expanded for failover);
    ``.table`` is the plan as `--dryrun` shows it. ``store``: where the cloud checks are
    cached (probed now when missing or stale). ``shown``: the id of the plan a dry run
    showed for this launch: run it as shown unless the task or catalogs changed since
    (skyd.pipeline.plancache; ``.reused``, or ``.replanned`` says why not)."""
    import anyio

    from skyd.pipeline import plancache
    from skyd.pipeline.plan_view import format_planned

    checks = await _checks(store, [task])
    pid = plancache.plan_id(task, minimize, catalog_dir)
    why = ""
    if shown and not blocked:
        got, why = await _shown_plan(task, shown, pid, catalog_dir, checks)
        if got is not None:
            return got
    planned = await anyio.to_thread.run_sync(plan_dag, [task], [], blocked, minimize, catalog_dir,
                                             checks)
    if planned.error is not None:
        await _add_check_reasons(planned.error, task, _ok(checks) or set(), store)
        raise planned.error
    choices = _ranked(planned)
    if not choices:
        raise ResourcesUnavailableError("no launchable resources", field="resources")
    choices.table = await anyio.to_thread.run_sync(format_planned, planned, [task])
    choices.plan_id = pid
    if not blocked:
        plancache.remember(pid, planned.fingerprint, choices.copy_as(reused=False))
    return choices.copy_as(reused=False, replanned=why)


async def dryrun(dag: Any, *, minimize: str = "cost", catalog_dir: str | None = None,
                 store: Any | None = None, cluster_name: str | None = None) -> dict[str, Any]:
    """The plan of a task or a whole DAG (a pipeline is solved as one chain, egress included):
    the choice `launch` would run, beside every catalog's offers and how to enable them."""
    import anyio

    from skyd.pipeline.plan_view import planned_to_json

    if any(t.workdir is not None and not isinstance(t.workdir, str) for t in dag.tasks):
        from skyd.pipeline.gitworkdir import require_git

        require_git()  # a git workdir is cloned at launch: the plan says so when it cannot be
    checks = await _checks(store, list(dag.tasks))
    planned = await anyio.to_thread.run_sync(
        plan_dag, list(dag.tasks), [tuple(e) for e in dag.edges], [], minimize, catalog_dir,
        checks)
    if planned.best() is None:
        assert planned.error is not None
        raise planned.error
    doc = await anyio.to_thread.run_sync(planned_to_json, planned, list(dag.tasks))
    if len(dag.tasks) == 1 and not dag.edges and planned.plans:
        # What `launch` runs when it names this plan (skyd.pipeline.plancache).
        from skyd.pipeline import plancache

        ranked = _ranked(planned)
        if ranked:
            ranked.table = str(doc.get("table") or "")
            ranked.plan_id = plancache.plan_id(dag.tasks[0], minimize, catalog_dir)
            plancache.remember(ranked.plan_id, planned.fingerprint, ranked)
            doc["plan_id"] = ranked.plan_id
    if store is not None and cluster_name:
        from skyd.pipeline.plan_view import note_reuse
        from skyd.pipeline.preflight import reuse_note

        note = await reuse_note(store, cluster_name, list(dag.tasks))
        if note is not None:
            note_reuse(doc, cluster_name, *note)
    return doc


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
