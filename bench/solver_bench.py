"""Solver benchmark: synthetic vms.csv catalogs loaded through SKYD_CATALOG_DIR.

Run: .venv/bin/python bench/solver_bench.py [--quick]
Warm figures are the median of 20 runs with the catalog already loaded.
"""

from __future__ import annotations

import functools
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from skyd.clouds.catalog import clear_catalog_cache, load_catalog
from skyd.clouds.catalog_csv import COLUMNS
from skyd.solver import DagRequest, ResourceRequest, TaskRequest, optimize
from skyd.solver.candidates import enumerate_task

GPU_TYPES = [  # (name, accelerator, count) -> 30 GPU types
    *[(f"a100-{n}", "A100", n) for n in (1, 2, 4, 8)],
    *[(f"h100-{n}", "H100", n) for n in (1, 2, 4, 8)],
    *[(f"t4-{n}", "T4", n) for n in (1, 2, 4)],
    *[(f"l4-{n}", "L4", n) for n in (1, 2, 4, 8)],
    *[(f"v100-{n}", "V100", n) for n in (1, 4, 8)],
    *[(f"a10g-{n}", "A10G", n) for n in (1, 4)],
    *[(f"mi300x-{n}", "MI300X", n) for n in (1, 8)],
    *[(f"l40s-{n}", "L40S", n) for n in (1, 4, 8)],
    *[(f"h200-{n}", "H200", n) for n in (8,)],
    *[(f"b200-{n}", "B200", n) for n in (8,)],
    *[(f"a100-80gb-{n}", "A100-80GB", n) for n in (1, 8)],
]
CPU_TYPES = [(f"{fam}.{s}x", s * 2) for fam in ("c", "m", "r", "n") for s in (1, 2, 4, 8, 16)]  # 20


def write_catalog(d: Path, n_types: int, n_regions: int, n_zones: int, seed: int = 0) -> int:
    """Rows spread over clouds aws/gcp/runpod by region; returns the row count."""
    rng = random.Random(seed)
    gpu = GPU_TYPES * (1 + n_types // len(GPU_TYPES))
    cpu = CPU_TYPES * (1 + n_types // len(CPU_TYPES))
    types: list[tuple[str, str, float, float]] = []
    vc: float
    for i in range(n_types):
        if i % 5 < 3 and i // 5 * 3 + i % 5 < len(gpu):
            name, acc, n = gpu[(i // 5) * 3 + i % 5]
            types.append((f"{name}-{i}", acc, float(n), 12.0 * n))
        else:
            name, vc = cpu[i % len(cpu)]
            types.append((f"{name}-{i}", "", 0.0, float(vc)))
    clouds = ("aws", "gcp", "runpod")
    files = {c: open(d / f"{c}.csv", "w") for c in clouds}  # noqa: SIM115
    rows = 0
    for f in files.values():
        f.write(",".join(COLUMNS) + "\n")
    for itype, acc, nacc, vcpus in types:
        base = (2.0 * nacc if acc else 0.05 * vcpus) * rng.uniform(0.8, 1.2)
        for r in range(n_regions):
            cloud = clouds[r % len(clouds)]
            for z in range(n_zones):
                p = base * rng.uniform(0.9, 1.3)
                spot = f"{p * 0.35:.4f}" if rng.random() < 0.8 else ""
                files[cloud].write(f"{itype},{acc},{nacc if acc else ''},{vcpus},{vcpus * 4},,"
                                   f"r{r},r{r}-{z},{p:.4f},{spot}\n")
                rows += 1
    for f in files.values():
        f.close()
    return rows


def med(fn: Callable[[], object], n: int = 20) -> float:
    fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def cold_load(d: Path, reps: int = 3) -> float:
    ts = []
    for _ in range(reps):
        clear_catalog_cache()
        t = time.perf_counter()
        load_catalog(d)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


R = ResourceRequest
MIX = [
    [R(accelerator="A100", accelerator_count=8)],
    [R(cpus=8, cpus_plus=True)],
    [R(accelerator="T4", accelerator_count=1, use_spot=True)],
    [R(accelerator="H100", accelerator_count=8), R(accelerator="A100", accelerator_count=8)],
    [R(accelerator="L4", accelerator_count=1)],
    [R(cpus=4, cpus_plus=True, memory_gib=16, memory_plus=True)],
    [R(accelerator="MI300X", accelerator_count=8), R(accelerator="H100", accelerator_count=8, use_spot=True)],
    [R(accelerator="V100", accelerator_count=1)],
    [R(accelerator="A10G", accelerator_count=1), R(accelerator="L4", accelerator_count=1)],
    [R(cpus=2, cpus_plus=True)],
]
WIDE = [R(cpus=2, cpus_plus=True)] + [R(accelerator=a, accelerator_count=1) for a in
                                     ("T4", "L4", "A10G", "V100", "A100", "H100", "L40S", "MI300X", "A100-80GB")]


def chain(n: int) -> DagRequest:
    tasks = [TaskRequest(f"t{i}", MIX[i % len(MIX)], output_gb=10.0) for i in range(n)]
    return DagRequest(tasks, [(i, i + 1) for i in range(n - 1)])


def random_dag(n: int, reqs: list[list[ResourceRequest]], seed: int = 1) -> DagRequest:
    rng = random.Random(seed)
    tasks = [TaskRequest(f"t{i}", reqs[i % len(reqs)], output_gb=rng.choice([5.0, 50.0, 200.0]))
             for i in range(n)]
    edges = {(i - 1, i) for i in range(1, n)}
    for v in range(2, n):
        for _ in range(rng.randint(0, 1)):
            edges.add((rng.randrange(0, v - 1), v))
    return DagRequest(tasks, sorted(edges))


def main() -> None:
    quick = "--quick" in sys.argv
    out: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as td:
        d = Path(td) / "small"
        d.mkdir()
        rows = write_catalog(d, 50, 10, 3)
        os.environ["SKYD_CATALOG_DIR"] = str(d)
        cold = cold_load(d)
        out.append((f"cold load+index {rows} rows", f"{cold * 1000:.1f} ms", "<= 150 ms"))
        cat = load_catalog(d)
        one = DagRequest([TaskRequest("t", [R(accelerator="A100", accelerator_count=8)])])
        out.append(("single task A100:8", f"{med(lambda: optimize(one, cat)) * 1000:.2f} ms", "<= 5 ms"))
        ch = chain(10)
        out.append(("10-task chain (mixed)", f"{med(lambda: optimize(ch, cat)) * 1000:.2f} ms", "<= 20 ms"))
        dag10 = random_dag(10, MIX)
        out.append((f"10-node DAG cost ({len(dag10.edges)} edges)",
                    f"{med(lambda: optimize(dag10, cat)) * 1000:.2f} ms", "<= 50 ms"))
        out.append(("10-node DAG time", f"{med(lambda: optimize(dag10, cat, minimize='time')) * 1000:.2f} ms", "-"))
        dag100 = random_dag(100, [WIDE])
        ncand = statistics.mean(len(enumerate_task(t, cat).candidates) for t in dag100.tasks)
        reps = 3 if quick else 20
        out.append((f"100-node DAG cost ({len(dag100.edges)} edges, {ncand:.0f} cands/node)",
                    f"{med(lambda: optimize(dag100, cat, max_plans=1), reps) * 1000:.0f} ms", "<= 2 s"))
        out.append(("  same, 3 ranked plans",
                    f"{med(lambda: optimize(dag100, cat), reps) * 1000:.0f} ms", "-"))
        out.append(("  same, time objective",
                    f"{med(lambda: optimize(dag100, cat, minimize='time', max_plans=1), reps) * 1000:.0f} ms", "-"))
        big = Path(td) / "big"
        big.mkdir()
        nrows = write_catalog(big, 100, 100, 10)
        out.append((f"cold load+index {nrows} rows", f"{cold_load(big, 2) * 1000:.0f} ms", "<= 2 s"))
        # Scaling table: nodes x candidates per node (catalog regions vary the candidates).
        table: list[str] = []
        for regions in (10, 30):
            dd = Path(td) / f"scale{regions}"
            dd.mkdir()
            write_catalog(dd, 50, regions, 3)
            c2 = load_catalog(dd)
            for n in (10, 25, 50, 100):
                dg = random_dag(n, [WIDE])
                nc = statistics.mean(len(enumerate_task(t, c2).candidates) for t in dg.tasks)
                t = med(functools.partial(optimize, dg, c2, max_plans=1), 3 if quick else 5)
                table.append(f"  {n:>4} nodes {len(dg.edges):>4} edges {nc:>6.0f} cands/node "
                             f"{regions:>3} locations  {t * 1000:>8.1f} ms")
    w = max(len(a) for a, _, _ in out)
    print(f"{'benchmark':<{w}}  {'median':>10}  target")
    for a, b, c in out:
        print(f"{a:<{w}}  {b:>10}  {c}")
    print("\nscaling (cost objective, 1 plan, median of 5):")
    print("\n".join(table))


if __name__ == "__main__":
    main()
