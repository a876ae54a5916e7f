"""General DAGs: integer program solved with HiGHS (highspy), cost or makespan objective.

Formulation (see docs/solver.md):
* ``x[v,k]`` binary, one-hot per node.
* ``y[v,l]`` = sum of x over node v's candidates at location l (the x itself when a location
  has one candidate, which is the usual case after pruning).
* Per edge (u, v) that carries data, ``z[l,m] >= 0`` continuous with the *marginal*
  constraints ``sum_m z[l,m] = y[u,l]`` and ``sum_l z[l,m] = y[v,m]``; for integral y this
  forces z to the product y[u,l]*y[v,m], and its LP relaxation is far tighter than the
  textbook three-inequality linearisation. Aggregating by location keeps z small.
* Job groups: the members' y are equal location by location.
* Time: ``f[v] >= f[u] + egress_time + t_v`` per edge, ``f[v] >= t_v``, ``M >= f[v]``;
  minimise M, then (second phase) the cost among plans within the optimal makespan.
* k best plans: no-good cuts ``sum_v x[v, a_v] <= n - 1`` for each plan found.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numpy as np

from skyd.solver.problem import Loc, Problem

_banner_lock = threading.Lock()
_banner_done = False
TIME_LIMIT_S = 30.0


def new_highs() -> Any:
    """A quiet ``highspy.Highs``: the one-time banner of the first instance never reaches stdout."""
    global _banner_done
    import highspy

    with _banner_lock:
        if not _banner_done:
            sys.stdout.flush()
            saved = os.dup(1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
                h = highspy.Highs()
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(devnull)
            _banner_done = True
        else:
            h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("log_to_console", False)
    return h


class _Rows:
    def __init__(self) -> None:
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.starts: list[int] = []
        self.idx: list[int] = []
        self.val: list[float] = []

    def add(self, cols: list[int], vals: list[float], lo: float, hi: float) -> None:
        self.starts.append(len(self.idx))
        self.idx.extend(cols)
        self.val.extend(vals)
        self.lo.append(lo)
        self.hi.append(hi)

    def push(self, h: Any) -> None:
        if not self.lo:
            return
        h.addRows(len(self.lo), np.array(self.lo), np.array(self.hi), len(self.idx),
                  np.array(self.starts, dtype=np.int32), np.array(self.idx, dtype=np.int32),
                  np.array(self.val, dtype=np.float64))


class GroupInfeasible(Exception):
    def __init__(self, group: list[int]) -> None:
        super().__init__(group)
        self.group = group


def solve_ilp(p: Problem, k: int = 1, time_limit_s: float = TIME_LIMIT_S) -> list[tuple[list[int], float]]:
    """Up to k best assignments with their primary objective value (exact within HiGHS gaps)."""
    import highspy

    inf = highspy.kHighsInf
    n = p.n
    lo: list[float] = []
    hi: list[float] = []
    cost1: list[float] = []  # primary objective
    cost2: list[float] = []  # secondary (time mode second phase: USD)
    ints: list[int] = []

    def col(lb: float, ub: float, c1: float = 0.0, c2: float = 0.0, integer: bool = False) -> int:
        lo.append(lb)
        hi.append(ub)
        cost1.append(c1)
        cost2.append(c2)
        if integer:
            ints.append(len(lo) - 1)
        return len(lo) - 1

    rows = _Rows()
    time_mode = p.objective == "time"
    # Group feasibility: allowed locations = intersection over members.
    allowed: list[set[Loc] | None] = [None] * n
    for g in p.groups:
        if len(g) < 2:
            continue
        common = set.intersection(*[{c.loc for c in p.cands[v]} for v in g])
        if not common:
            raise GroupInfeasible(g)
        for v in g:
            allowed[v] = common
    x: list[list[int]] = []
    for v in range(n):
        xs = []
        for j, c in enumerate(p.cands[v]):
            ub = 1.0 if allowed[v] is None or c.loc in allowed[v] else 0.0  # type: ignore[operator]
            c1 = 0.0 if time_mode else p.primary[v][j]
            c2 = p.secondary[v][j] if time_mode else 0.0
            xs.append(col(0.0, ub, c1, c2, integer=True))
        x.append(xs)
        rows.add(xs, [1.0] * len(xs), 1.0, 1.0)
    # y per (node, location), created on demand.
    ycache: dict[tuple[int, Loc], int] = {}
    locs_of: list[dict[Loc, list[int]]] = []
    for v in range(n):
        d: dict[Loc, list[int]] = {}
        for j, c in enumerate(p.cands[v]):
            d.setdefault(c.loc, []).append(j)
        locs_of.append(d)

    def y(v: int, loc: Loc) -> int:
        key = (v, loc)
        if key not in ycache:
            js = locs_of[v][loc]
            if len(js) == 1:
                ycache[key] = x[v][js[0]]
            else:
                c = col(0.0, 1.0)
                rows.add([c] + [x[v][j] for j in js], [1.0] + [-1.0] * len(js), 0.0, 0.0)
                ycache[key] = c
        return ycache[key]

    for g in p.groups:
        if len(g) < 2:
            continue
        shared = allowed[g[0]]
        assert shared is not None
        for other in g[1:]:
            for loc in sorted(shared):
                rows.add([y(g[0], loc), y(other, loc)], [1.0, -1.0], 0.0, 0.0)
    # Edges.
    f: list[int] = []
    mcol = -1
    if time_mode:
        f = [col(0.0, inf) for _ in range(n)]
        mcol = col(0.0, inf, 1.0, 0.0)
        for v in range(n):
            rows.add([f[v]] + x[v], [1.0] + [-t for t in p.primary[v]], 0.0, inf)
            rows.add([mcol, f[v]], [1.0, -1.0], 0.0, inf)
    for e, (u, v) in enumerate(p.edges):
        live = p.edge_gb[e] > 0
        zcols: list[int] = []
        zt: list[float] = []
        if live:
            lu, lv = list(locs_of[u]), list(locs_of[v])
            grid: list[list[int]] = []
            for a in lu:
                rowz = []
                for b in lv:
                    ep, es = p.edge_value(e, a, b)
                    zc = col(0.0, inf, 0.0 if time_mode else ep, es if time_mode else 0.0)
                    rowz.append(zc)
                    zcols.append(zc)
                    zt.append(ep)
                grid.append(rowz)
            for ia, a in enumerate(lu):
                rows.add(grid[ia] + [y(u, a)], [1.0] * len(lv) + [-1.0], 0.0, 0.0)
            for ib, b in enumerate(lv):
                rows.add([grid[ia][ib] for ia in range(len(lu))] + [y(v, b)],
                         [1.0] * len(lu) + [-1.0], 0.0, 0.0)
        if time_mode:
            cols = [f[v], f[u]] + x[v] + zcols
            vals = [1.0, -1.0] + [-t for t in p.primary[v]] + [-t for t in zt]
            rows.add(cols, vals, 0.0, inf)

    h = new_highs()
    h.setOptionValue("mip_rel_gap", 1e-7)
    h.setOptionValue("mip_abs_gap", 1e-9)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("threads", 1)
    h.setOptionValue("mip_detect_symmetry", False)  # halves small-model MIP time here
    h.setOptionValue("presolve", "off")  # LP first: presolve costs more than it saves here
    nc = len(lo)
    h.addVars(nc, np.array(lo), np.array(hi))
    all_idx = np.arange(nc, dtype=np.int32)
    obj1 = np.array(cost1)
    h.changeColsCost(nc, all_idx, obj1)
    rows.push(h)
    xcols = np.array([c for xs in x for c in xs], dtype=np.int32)
    state = {"mip": False}

    def _solve() -> bool:
        """LP relaxation first; it is usually integral (marginal form). Else branch and bound."""
        if not state["mip"]:
            if _run(h):
                vals = np.asarray(h.getSolution().col_value)[xcols]
                if np.all(np.minimum(np.abs(vals), np.abs(vals - 1.0)) < 1e-7):
                    return True
            state["mip"] = True
            h.changeColsIntegrality(len(ints), np.array(ints, dtype=np.int32),
                                    np.array([highspy.HighsVarType.kInteger] * len(ints)))
        return _run(h)

    results: list[tuple[list[int], float]] = []
    for _ in range(max(1, k)):
        if not _solve():
            break
        if time_mode:
            span = h.getInfo().objective_function_value
            tol = max(1e-6, abs(span) * 1e-9)
            h.addRow(-inf, span + tol, 1, np.array([mcol], dtype=np.int32), np.array([1.0]))
            h.changeColsCost(nc, all_idx, np.array(cost2))
            ok = _solve()
            h.deleteRows(1, np.array([h.getNumRow() - 1], dtype=np.int32))
            h.changeColsCost(nc, all_idx, obj1)
            if not ok:
                break
        sol = h.getSolution().col_value
        assign = [int(np.argmax([sol[c] for c in x[v]])) for v in range(n)]
        results.append((assign, p.evaluate(assign)[0]))
        cut = [x[v][assign[v]] for v in range(n)]
        h.addRow(-inf, float(n - 1), n, np.array(cut, dtype=np.int32), np.ones(n))
    return results


def _run(h: Any) -> bool:
    import highspy

    h.run()
    st = h.getModelStatus()
    if st == highspy.HighsModelStatus.kOptimal:
        return True
    # Time limit with a feasible incumbent: use it (documented), else give up.
    return bool(st == highspy.HighsModelStatus.kTimeLimit and h.getInfo().primal_solution_status == 2)
