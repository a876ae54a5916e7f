"""Property tests: DP and ILP optima equal brute force; DP equals ILP on chains."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyd.clouds.catalog import Catalog
from skyd.clouds.offering import Offering
from skyd.errors import ResourcesUnavailableError
from skyd.solver.candidates import enumerate_task
from skyd.solver.dp import solve_chain
from skyd.solver.ilp import solve_ilp
from skyd.solver.optimize import optimize
from skyd.solver.problem import Problem, build_problem, prune, solve_brute
from skyd.solver.request import DagRequest, ResourceRequest, TaskRequest

CLOUDS = ("aws", "gcp", "runpod")
REGIONS = ("r0", "r1")
SHAPES = (("A100", 1.0), ("A100", 8.0), ("T4", 1.0), (None, 0.0))
REQS = (
    ResourceRequest(accelerator="A100", accelerator_count=1),
    ResourceRequest(accelerator="A100", accelerator_count=8),
    ResourceRequest(accelerator="T4", accelerator_count=1),
    ResourceRequest(cpus=8, cpus_plus=True),
    ResourceRequest(accelerator="T4", accelerator_count=1, use_spot=True),
)


@st.composite
def catalogs(draw: st.DrawFn) -> Catalog:
    rows = []
    for cloud in CLOUDS:
        for region in REGIONS:
            for acc, n in SHAPES:
                # Each shape exists on every cloud/region with some probability; A100:1 always
                # in one place so the default request below is always feasible.
                if not draw(st.booleans()) and not (cloud == "aws" and region == "r0"):
                    continue
                price = draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0, 8.0, 12.0]))
                spot = draw(st.sampled_from([None, 0.3, 0.9]))
                rows.append(Offering(cloud, f"{acc or 'cpu'}-{n:g}", acc, n, 8.0 if acc is None else 16.0,
                                     32.0, region, f"{region}a", price, spot))
    return Catalog(rows, enabled=CLOUDS)


@st.composite
def dags(draw: st.DrawFn, chain: bool) -> DagRequest:
    n = draw(st.integers(1, 4))
    tasks = []
    for i in range(n):
        k = draw(st.integers(1, 2))
        reqs = [draw(st.sampled_from(REQS)) for _ in range(k)]
        tasks.append(TaskRequest(
            f"t{i}", reqs, num_nodes=draw(st.integers(1, 2)),
            estimated_runtime_s=draw(st.sampled_from([None, 600.0, 7200.0])),
            output_gb=draw(st.sampled_from([0.0, 20.0, 400.0])),
            input_gb=draw(st.sampled_from([0.0, 50.0])), input_cloud="aws", input_region="r0",
        ))
    if chain:
        edges = [(i, i + 1) for i in range(n - 1)]
    else:
        edges = [(u, v) for u in range(n) for v in range(u + 1, n) if draw(st.booleans())]
    return DagRequest(tasks, edges)


def _problem(dag: DagRequest, cat: Catalog, objective: str) -> Problem | None:
    # Only "nothing fits" makes a drawn problem void; any other exception is a bug.
    try:
        cands = [enumerate_task(t, cat).candidates for t in dag.tasks]
    except ResourcesUnavailableError:
        return None
    return build_problem(dag, cands, objective, use_speed=objective == "time")


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("objective", ["cost", "time"])
@SETTINGS
@given(data=st.data())
def test_dp_equals_brute_force_and_ilp_on_chains(objective: str, data: st.DataObject) -> None:
    cat = data.draw(catalogs())
    dag = data.draw(dags(chain=True))
    full = _problem(dag, cat, objective)
    if full is None:
        return
    brute = solve_brute(full)
    assert brute is not None
    p, _ = prune(full)
    order = p.is_chain()
    assert order is not None
    dp = solve_chain(p, order, k=3)
    assert dp[0][1] == pytest.approx(brute[1], rel=1e-9, abs=1e-9)
    assert [v for _, v in dp] == sorted(v for _, v in dp)
    ilp = solve_ilp(p, k=1)
    assert ilp[0][1] == pytest.approx(brute[1], rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("objective", ["cost", "time"])
@SETTINGS
@given(data=st.data())
def test_ilp_equals_brute_force_on_dags(objective: str, data: st.DataObject) -> None:
    cat = data.draw(catalogs())
    dag = data.draw(dags(chain=False))
    full = _problem(dag, cat, objective)
    if full is None:
        return
    brute = solve_brute(full)
    assert brute is not None
    p, _ = prune(full)
    ilp = solve_ilp(p, k=2)
    assert ilp[0][1] == pytest.approx(brute[1], rel=1e-6, abs=1e-6)
    if len(ilp) > 1:  # the second plan is a different assignment, no better than the first
        assert ilp[1][0] != ilp[0][0]
        assert ilp[1][1] >= ilp[0][1] - 1e-6
    # The entry point agrees (it may pick the DP for some shapes).
    plans = optimize(dag, cat, minimize=objective)
    assert plans[0].objective_value == pytest.approx(brute[1], rel=1e-6, abs=1e-6)
    values = [pl.objective_value for pl in plans]
    assert values == sorted(values)  # ranked, best first
    picks = [tuple((t.chosen.cloud, t.chosen.region, t.chosen.instance_type) for t in pl.tasks)
             for pl in plans]
    assert len(set(picks)) == len(picks)  # distinct fallbacks


@SETTINGS
@given(data=st.data())
def test_job_groups_share_cloud_and_region(data: st.DataObject) -> None:
    cat = data.draw(catalogs())
    dag = data.draw(dags(chain=False))
    if len(dag.tasks) < 2:
        return
    dag.tasks[0].group = dag.tasks[-1].group = "g"
    full = _problem(dag, cat, "cost")
    if full is None:
        return
    brute = solve_brute(full)
    if brute is None:
        with pytest.raises(Exception, match="job group"):
            optimize(dag, cat)
        return
    plans = optimize(dag, cat)
    a, b = plans[0].tasks[0].chosen, plans[0].tasks[-1].chosen
    assert (a.cloud, a.region) == (b.cloud, b.region)
    assert plans[0].objective_value == pytest.approx(brute[1], rel=1e-6, abs=1e-6)
