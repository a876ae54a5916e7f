"""Chain DAGs: dynamic programming over (node, candidate), k best paths.

``best[v][j]`` holds up to k (value, parent candidate, parent rank) entries, value being the
pair (primary, secondary) summed along the chain. Transitions are aggregated by the parent's
location, because the edge value depends only on the two locations.
"""

from __future__ import annotations

import heapq

from skyd.solver.problem import Loc, Problem

Entry = tuple[float, float, int, int]  # primary, secondary, parent candidate, parent rank


def solve_chain(p: Problem, order: list[int], k: int = 1) -> list[tuple[list[int], float]]:
    """Up to k best assignments (candidate index per node) with their primary objective."""
    edge_of: dict[tuple[int, int], int] = {(u, v): e for e, (u, v) in enumerate(p.edges)}
    tables: list[list[list[Entry]]] = []
    first = order[0]
    tables.append([[(p.primary[first][j], p.secondary[first][j], -1, -1)]
                   for j in range(len(p.cands[first]))])
    for pos in range(1, len(order)):
        u, v = order[pos - 1], order[pos]
        prev = tables[-1]
        e = edge_of.get((u, v))
        live = e is not None and p.edge_gb[e] > 0
        # Best-k entries of u per location.
        by_loc: dict[Loc, list[tuple[float, float, int, int]]] = {}
        for i, lst in enumerate(prev):
            loc = p.cands[u][i].loc
            bucket = by_loc.setdefault(loc, [])
            for r, ent in enumerate(lst):
                bucket.append((ent[0], ent[1], i, r))
        if not live:
            merged = heapq.nsmallest(k, [x for b in by_loc.values() for x in b])
            table = []
            for j in range(len(p.cands[v])):
                pj, sj = p.primary[v][j], p.secondary[v][j]
                table.append([(a + pj, b + sj, i, r) for a, b, i, r in merged])
            tables.append(table)
            continue
        assert e is not None
        locs = [(loc, heapq.nsmallest(k, b)) for loc, b in by_loc.items()]
        table = []
        for j in range(len(p.cands[v])):
            lj = p.cands[v][j].loc
            pj, sj = p.primary[v][j], p.secondary[v][j]
            opts: list[Entry] = []
            for loc, best in locs:
                ep, es = p.edge_value(e, loc, lj)
                for a, b, i, r in best:
                    opts.append((a + ep + pj, b + es + sj, i, r))
            table.append(heapq.nsmallest(k, opts) if len(opts) > k else sorted(opts))
        tables.append(table)
    last = tables[-1]
    finals = heapq.nsmallest(k, [(ent[0], ent[1], j, r) for j, lst in enumerate(last)
                                 for r, ent in enumerate(lst)])
    out: list[tuple[list[int], float]] = []
    for val, _s, j, r in finals:
        assign = [0] * p.n
        pos = len(order) - 1
        while pos >= 0:
            assign[order[pos]] = j
            ent = tables[pos][j][r]
            j, r = ent[2], ent[3]
            pos -= 1
        out.append((assign, val))
    return out
