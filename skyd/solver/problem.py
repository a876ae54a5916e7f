"""The solver's internal problem: per node candidate values, per edge data sizes, groups.

Values are pairs (primary, secondary): primary is the objective (USD for "cost", seconds for
"time"), secondary the other one, used to break ties. Edge values depend only on the
(cloud, region) of both ends, which is what makes pruning and aggregation by location exact.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from skyd.solver.candidates import Candidate
from skyd.solver.costs import egress_cost, egress_time_s, estimated_runtime_s, runtime_s
from skyd.solver.request import DagRequest

Loc = tuple[str, str]


@dataclass
class Problem:
    objective: str  # "cost" | "time"
    cands: list[list[Candidate]]
    primary: list[list[float]]
    secondary: list[list[float]]
    runtime: list[list[float]]  # seconds per candidate
    edges: list[tuple[int, int]]
    edge_gb: list[float]
    groups: list[list[int]] = field(default_factory=list)
    _ev: dict[tuple[int, Loc, Loc], tuple[float, float]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.cands)

    def edge_value(self, e: int, a: Loc, b: Loc) -> tuple[float, float]:
        """(primary, secondary) of moving edge e's data from location a to b."""
        key = (e, a, b)
        v = self._ev.get(key)
        if v is None:
            gb = self.edge_gb[e]
            cost = egress_cost(a[0], a[1], b[0], b[1], gb)
            t = egress_time_s(a == b, gb)
            v = (cost, t) if self.objective == "cost" else (t, cost)
            self._ev[key] = v
        return v

    def is_chain(self) -> list[int] | None:
        """Node order if the DAG can be solved by the chain DP, else None."""
        if self.groups and any(len(g) > 1 for g in self.groups):
            return None
        n = self.n
        live = [(u, v) for e, (u, v) in enumerate(self.edges) if self.edge_gb[e] > 0]
        if self.objective == "cost" and not live:
            return list(range(n))  # independent sums: any order
        if len(self.edges) != n - 1:
            return None
        nxt: dict[int, int] = {}
        indeg = [0] * n
        for u, v in self.edges:
            if u in nxt:
                return None
            nxt[u] = v
            indeg[v] += 1
        starts = [i for i in range(n) if indeg[i] == 0]
        if len(starts) != 1 or any(d > 1 for d in indeg):
            return None
        order = [starts[0]]
        while order[-1] in nxt:
            order.append(nxt[order[-1]])
        return order if len(order) == n else None

    def evaluate(self, assign: Sequence[int]) -> tuple[float, float, float]:
        """(objective, total cost in USD, makespan in s) of an assignment."""
        cost = 0.0
        finish = [0.0] * self.n
        node_t = [0.0] * self.n
        for v, k in enumerate(assign):
            p, s = self.primary[v][k], self.secondary[v][k]
            c, t = (p, s) if self.objective == "cost" else (s, p)
            cost += c
            node_t[v] = t
        preds: dict[int, list[tuple[int, int]]] = {}
        for e, (u, v) in enumerate(self.edges):
            preds.setdefault(v, []).append((e, u))
            p, s = self.edge_value(e, self.cands[u][assign[u]].loc, self.cands[v][assign[v]].loc)
            cost += p if self.objective == "cost" else s
        for v in _topo(self.n, self.edges):
            start = 0.0
            for e, u in preds.get(v, ()):
                p, s = self.edge_value(e, self.cands[u][assign[u]].loc, self.cands[v][assign[v]].loc)
                et = s if self.objective == "cost" else p
                start = max(start, finish[u] + et)
            finish[v] = start + node_t[v]
        makespan = max(finish) if finish else 0.0
        return (cost if self.objective == "cost" else makespan), cost, makespan


def _topo(n: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    indeg = [0] * n
    out: dict[int, list[int]] = {}
    for u, v in edges:
        indeg[v] += 1
        out.setdefault(u, []).append(v)
    stack = [i for i in range(n) if indeg[i] == 0]
    order: list[int] = []
    while stack:
        u = stack.pop()
        order.append(u)
        for v in out.get(u, ()):
            indeg[v] -= 1
            if indeg[v] == 0:
                stack.append(v)
    if len(order) != n:
        from skyd.errors import InvalidSpecError

        raise InvalidSpecError("the task DAG has a cycle", field="dag")
    return order


def build_problem(
    dag: DagRequest, cands: list[list[Candidate]], objective: str, use_speed: bool
) -> Problem:
    primary: list[list[float]] = []
    secondary: list[list[float]] = []
    runtimes: list[list[float]] = []
    for task, cs in zip(dag.tasks, cands, strict=True):
        ref = task.candidates[0] if task.candidates else None
        ra = ref.accelerator if ref else None
        rc = ref.accelerator_count if ref else 0.0
        ps, ss, rs = [], [], []
        for c in cs:
            est = estimated_runtime_s(task.name, c.accelerator, c.accelerator_count, c.instance_type)
            rt = est if est is not None else runtime_s(
                task.estimated_runtime_s, ra, rc, c.accelerator, c.accelerator_count, use_speed)
            cost = c.hourly_cost * rt / 3600.0
            t = rt
            if task.input_gb > 0 and task.input_cloud:
                cost += egress_cost(task.input_cloud, task.input_region, c.cloud, c.region, task.input_gb)
                same = task.input_cloud == c.cloud and task.input_region in (None, c.region)
                t += egress_time_s(same, task.input_gb)
            ps.append(cost if objective == "cost" else t)
            ss.append(t if objective == "cost" else cost)
            rs.append(rt)
        primary.append(ps)
        secondary.append(ss)
        runtimes.append(rs)
    groups: dict[str, list[int]] = {}
    for i, task in enumerate(dag.tasks):
        if task.group:
            groups.setdefault(task.group, []).append(i)
    edge_gb = [float(dag.tasks[u].output_gb) for u, _ in dag.edges]
    return Problem(objective, cands, primary, secondary, runtimes, list(dag.edges), edge_gb,
                   list(groups.values()))


def prune(p: Problem) -> tuple[Problem, list[list[int]]]:
    """Drop dominated candidates per (task, location); returns the problem and index maps.

    Edge values and group constraints depend only on the location, so within one location a
    candidate that is no better in primary and secondary value can never be needed. For the
    cost objective only the best per location is kept; for time the (time, cost) Pareto set.
    """
    keep_all: list[list[int]] = []
    for v in range(p.n):
        by_loc: dict[Loc, list[int]] = {}
        for k, c in enumerate(p.cands[v]):
            by_loc.setdefault(c.loc, []).append(k)
        keep: list[int] = []
        for ks in by_loc.values():
            ks.sort(key=lambda k: (p.primary[v][k], p.secondary[v][k]))
            if p.objective == "cost":
                keep.append(ks[0])
                continue
            best_s = float("inf")
            for k in ks:
                if p.secondary[v][k] < best_s:
                    keep.append(k)
                    best_s = p.secondary[v][k]
        keep.sort()
        keep_all.append(keep)
    q = Problem(
        p.objective,
        [[p.cands[v][k] for k in ks] for v, ks in enumerate(keep_all)],
        [[p.primary[v][k] for k in ks] for v, ks in enumerate(keep_all)],
        [[p.secondary[v][k] for k in ks] for v, ks in enumerate(keep_all)],
        [[p.runtime[v][k] for k in ks] for v, ks in enumerate(keep_all)],
        p.edges, p.edge_gb, p.groups,
    )
    return q, keep_all


def group_ok(p: Problem, assign: Sequence[int]) -> bool:
    for g in p.groups:
        locs = {p.cands[v][assign[v]].loc for v in g}
        if len(locs) > 1:
            return False
    return True


def neighbours(p: Problem, base: Sequence[int], k: int, per_task: int = 3) -> list[tuple[list[int], float]]:
    """Up to k next-best plans that change one task (with its job group) from ``base``.

    For each task, its ``per_task`` best other candidates (by own value) are tried; every
    result is evaluated exactly and the k best distinct ones are returned, best first.
    """
    group_of: dict[int, list[int]] = {}
    for g in p.groups:
        for v in g:
            group_of[v] = g
    seen = {tuple(base)}
    found: list[tuple[float, float, list[int]]] = []
    for v in range(p.n):
        order = sorted(range(len(p.cands[v])), key=list(zip(p.primary[v], p.secondary[v], strict=True)).__getitem__)
        tried = 0
        for j in order:
            if tried >= per_task:
                break
            if j == base[v]:
                continue
            a = list(base)
            a[v] = j
            loc = p.cands[v][j].loc
            ok = True
            for w in group_of.get(v, ()):
                if w == v:
                    continue
                opts = [i for i, c in enumerate(p.cands[w]) if c.loc == loc]
                if not opts:
                    ok = False
                    break
                a[w] = min(opts, key=p.primary[w].__getitem__)
            if not ok or tuple(a) in seen:
                continue
            seen.add(tuple(a))
            tried += 1
            obj, cost, span = p.evaluate(a)
            found.append((obj, cost if p.objective == "time" else span, a))
    found.sort(key=lambda t: (t[0], t[1]))
    return [(a, obj) for obj, _s, a in found[:k]]


def solve_brute(p: Problem) -> tuple[list[int], float] | None:
    """Exhaustive optimum (tests and tiny problems only)."""
    best: tuple[float, float] | None = None
    best_a: list[int] | None = None
    for a in itertools.product(*[range(len(c)) for c in p.cands]):
        if not group_ok(p, a):
            continue
        obj, cost, span = p.evaluate(a)
        key = (obj, cost if p.objective == "time" else span)
        if best is None or key < best:
            best, best_a = key, list(a)
    if best is None or best_a is None:
        return None
    return best_a, best[0]
