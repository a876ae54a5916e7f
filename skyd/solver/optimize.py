"""The single entry point: DagRequest + Catalog -> ranked plans. Pure; no I/O."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence

import anyio

from skyd.clouds.catalog import Catalog
from skyd.errors import InvalidSpecError, ResourcesUnavailableError
from skyd.solver.candidates import TaskCandidates, enumerate_task
from skyd.solver.dp import solve_chain
from skyd.solver.plan import Choice, Plan, TaskPlan
from skyd.solver.problem import Problem, build_problem, neighbours, prune
from skyd.solver.request import Block, DagRequest

OBJECTIVES = ("cost", "time")


def _validate(dag: DagRequest, minimize: str) -> None:
    if minimize not in OBJECTIVES:
        raise InvalidSpecError(f"unknown objective {minimize!r}", field="minimize",
                               hint="use --minimize cost or --minimize time")
    if not dag.tasks:
        raise InvalidSpecError("the DAG has no tasks", field="dag")
    n = len(dag.tasks)
    for u, v in dag.edges:
        if not (0 <= u < n and 0 <= v < n) or u == v:
            raise InvalidSpecError(f"bad DAG edge ({u}, {v}) for {n} tasks", field="dag")
    for t in dag.tasks:
        if t.num_nodes < 1:
            raise InvalidSpecError(f"task {t.name!r}: num_nodes must be >= 1", field="num_nodes")


def solve(p: Problem, k: int, names: Sequence[str] = ()) -> list[tuple[list[int], float]]:
    """Dispatch: chain DP when the DAG allows it, else the HiGHS ILP."""
    order = p.is_chain()
    if order is not None:
        return solve_chain(p, order, k)
    from skyd.solver.ilp import GroupInfeasible, solve_ilp

    try:
        best = solve_ilp(p, 1)
    except GroupInfeasible as g:
        raise _group_error(p, g.group, names) from None
    if not best or k <= 1:
        return best
    # Ranked fallbacks: exact k-best (no-good cuts) costs a MIP per plan; one-task swaps
    # from the optimum are what failover needs and cost one evaluation each.
    return best + neighbours(p, best[0][0], k - 1)


def _group_error(p: Problem, group: list[int], names: Sequence[str]) -> ResourcesUnavailableError:
    per = []
    for v in group:
        locs = sorted({f"{c.cloud}/{c.region}" for c in p.cands[v]})
        shown = ", ".join(locs[:5]) + (", …" if len(locs) > 5 else "")
        name = names[v] if v < len(names) else str(v)
        per.append(f"{name!r}: {shown}")
    return ResourcesUnavailableError(
        "job group tasks must share a cloud and region, but no location offers all of them ("
        + "; ".join(per) + ")",
        field="resources",
        hint="give the group's tasks resources that exist in a common region",
    )


def optimize(
    dag: DagRequest,
    catalog: Catalog,
    *,
    minimize: str = "cost",
    blocked: Sequence[Block] = (),
    max_alternatives: int = 5,
    max_plans: int = 3,
    enabled: Collection[str] | None = None,
    runtime_model: str = "auto",
    prune_dominated: bool = True,
) -> list[Plan]:
    """Ranked plans for the DAG, best first (at most ``max_plans``; at least one or it raises).

    ``runtime_model``: "given" (every candidate takes the task's estimate, SkyPilot's
    behaviour), "speed" (scaled by :data:`skyd.solver.costs.RELATIVE_SPEED`), or "auto"
    (given for cost, speed for time). Raises ResourcesUnavailableError with the reasons when
    a task has no launchable candidate or a job group has no common location.
    """
    _validate(dag, minimize)
    tcs = [enumerate_task(t, catalog, enabled, blocked) for t in dag.tasks]
    use_speed = runtime_model == "speed" or (runtime_model == "auto" and minimize == "time")
    full = build_problem(dag, [tc.candidates for tc in tcs], minimize, use_speed)
    if prune_dominated:
        p, keep = prune(full)
    else:
        p, keep = full, [list(range(len(c))) for c in full.cands]
    sols = solve(p, max(1, max_plans), [t.name for t in dag.tasks])
    if not sols:
        raise ResourcesUnavailableError("no feasible plan for the DAG", field="resources")
    return [_make_plan(full, p, keep, tcs, a, rank, max_alternatives)
            for rank, (a, _v) in enumerate(sols)]


def _make_plan(
    full: Problem, p: Problem, keep: list[list[int]], tcs: list[TaskCandidates],
    assign: list[int], rank: int, max_alt: int,
) -> Plan:
    obj, cost, span = p.evaluate(assign)
    tasks: list[TaskPlan] = []
    hourly = 0.0
    for v, tc in enumerate(tcs):
        k_full = keep[v][assign[v]]
        chosen = full.cands[v][k_full]
        hourly += chosen.hourly_cost
        order = sorted(range(len(full.cands[v])),
                       key=list(zip(full.primary[v], full.secondary[v], strict=True)).__getitem__)
        alts: list[Choice] = []
        seen = {(chosen.cloud, chosen.instance_type, chosen.use_spot)}
        for j in order:
            if len(alts) >= max_alt:
                break
            c = full.cands[v][j]
            key = (c.cloud, c.instance_type, c.use_spot)
            if key in seen:
                continue
            seen.add(key)
            alts.append(Choice.of(c, full.runtime[v][j]))
        tasks.append(TaskPlan(tc.task.name, Choice.of(chosen, full.runtime[v][k_full]), alts))
    return Plan(full.objective, tasks, hourly, obj, cost, span, rank)


async def optimize_async(dag: DagRequest, catalog: Catalog, **kw: object) -> list[Plan]:
    """:func:`optimize` off the event loop (it is CPU work: enumeration and HiGHS)."""
    fn = functools.partial(optimize, dag, catalog, **kw)  # type: ignore[arg-type]
    return await anyio.to_thread.run_sync(fn)
