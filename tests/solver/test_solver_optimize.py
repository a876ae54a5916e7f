"""optimize() on the bundled catalogs: reasoned errors, ordered/any_of, blocked, plans, output."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skyd.clouds.catalog import Catalog, clear_catalog_cache, load_catalog
from skyd.errors import NotFoundError, ResourcesUnavailableError
from skyd.solver import (
    Block,
    DagRequest,
    ResourceRequest,
    TaskRequest,
    format_plan_table,
    gpu_listing,
    optimize,
    optimize_async,
    plan_to_json,
)


@pytest.fixture
def cat(skyd_home: Path) -> Catalog:
    clear_catalog_cache()
    # As if credentials for these four were present.
    return load_catalog().with_enabled(["aws", "gcp", "runpod", "lambda"])


def one(*reqs: ResourceRequest, ordered: bool = False, **kw: object) -> DagRequest:
    return DagRequest([TaskRequest("train", list(reqs), ordered=ordered, **kw)])  # type: ignore[arg-type]


A100_8 = ResourceRequest(accelerator="A100", accelerator_count=8)


def test_single_task_cheapest_and_alternatives(cat: Catalog) -> None:
    plans = optimize(one(A100_8), cat)
    best = plans[0].tasks[0]
    assert (best.chosen.cloud, best.chosen.instance_type, best.chosen.hourly_cost) == (
        "lambda", "gpu_8x_a100", 10.32)
    alts = {(a.cloud, a.instance_type) for a in best.alternatives}
    assert ("aws", "p4d.24xlarge") in alts and ("gcp", "a2-highgpu-8g") in alts
    assert len(plans) == 3 and plans[0].objective_value <= plans[1].objective_value
    aws = optimize(one(ResourceRequest(cloud="aws", accelerator="a100", accelerator_count=8)), cat)
    c = aws[0].tasks[0].chosen
    assert (c.instance_type, c.region, c.hourly_cost) == ("p4d.24xlarge", "us-east-1", 32.7726)
    assert c.zone in c.zones and len(c.zones) >= 2  # in-region failover order


def test_num_nodes_multiplies_cost(cat: Catalog) -> None:
    p = optimize(one(A100_8, num_nodes=3), cat)[0]
    assert p.total_hourly_cost == pytest.approx(3 * 10.32)
    assert p.tasks[0].chosen.num_nodes == 3


def test_reasoned_errors(cat: Catalog) -> None:
    with pytest.raises(ResourcesUnavailableError) as e:
        optimize(one(ResourceRequest(accelerator="MI300X", accelerator_count=16)), cat)
    assert "MI300X:16 — no instance has 16 MI300X" in str(e.value)
    assert re.search(r"the largest is 8 \([a-z]+(, [a-z]+)*", str(e.value)), str(e.value)
    assert e.value.field == "resources" and e.value.exit_code == 4
    with pytest.raises(ResourcesUnavailableError, match=r"not offered in region xx; offered in: aws \(us-east-1, .*gcp \("):
        optimize(one(ResourceRequest(accelerator="A100", accelerator_count=8, region="xx")), cat)
    with pytest.raises(ResourcesUnavailableError, match="unknown cloud 'nocloud'"):
        optimize(one(ResourceRequest(cloud="nocloud")), cat)
    with pytest.raises(ResourcesUnavailableError, match="unknown accelerator 'A1000'; did you mean"):
        optimize(one(ResourceRequest(accelerator="A1000", accelerator_count=1)), cat)
    with pytest.raises(ResourcesUnavailableError, match="'oci' is not enabled .catalog only"):
        optimize(one(ResourceRequest(cloud="oci", accelerator="MI300X", accelerator_count=8)), cat)
    with pytest.raises(ResourcesUnavailableError, match="no spot offering"):
        optimize(one(ResourceRequest(cloud="lambda", accelerator="A100", accelerator_count=8,
                                     use_spot=True)), cat)
    with pytest.raises(ResourcesUnavailableError, match="needs 500\\+ vCPUs; the most offered is"):
        optimize(one(ResourceRequest(accelerator="H100", accelerator_count=8, cpus=500, cpus_plus=True)), cat)


def test_blocked_resources_excluded(cat: Catalog) -> None:
    p = optimize(one(A100_8), cat, blocked=[Block("lambda")])[0]
    assert p.tasks[0].chosen.cloud != "lambda"
    p2 = optimize(one(ResourceRequest(cloud="aws", accelerator="A100", accelerator_count=8)), cat,
                  blocked=[Block("aws", region="us-east-1")])[0]
    assert p2.tasks[0].chosen.region != "us-east-1"
    with pytest.raises(ResourcesUnavailableError, match="blocked"):
        optimize(one(ResourceRequest(cloud="aws", accelerator="A100", accelerator_count=8)), cat,
                 blocked=[Block("aws", instance_type="p4d.24xlarge")])


def test_ordered_uses_first_launchable_any_of_uses_cheapest(cat: Catalog) -> None:
    gcp = ResourceRequest(cloud="gcp", accelerator="A100", accelerator_count=8)
    lam = ResourceRequest(cloud="lambda", accelerator="A100", accelerator_count=8)
    impossible = ResourceRequest(accelerator="H100", accelerator_count=16)
    assert optimize(one(impossible, gcp, lam, ordered=True), cat)[0].tasks[0].chosen.cloud == "gcp"
    assert optimize(one(gcp, lam), cat)[0].tasks[0].chosen.cloud == "lambda"
    assert optimize(one(impossible, gcp), cat)[0].tasks[0].chosen.cloud == "gcp"


def test_egress_keeps_chain_together(cat: Catalog) -> None:
    # Big outputs: the CPU consumer follows the producer's cloud+region rather than the
    # cheapest CPU box elsewhere.
    dag = DagRequest([
        TaskRequest("prep", [ResourceRequest(cloud="gcp", cpus=8)], output_gb=5000.0),
        TaskRequest("train", [ResourceRequest(accelerator="T4", accelerator_count=1)]),
    ], [(0, 1)])
    p = optimize(dag, cat)[0]
    a, b = p.tasks[0].chosen, p.tasks[1].chosen
    assert (a.cloud, a.region) == (b.cloud, b.region)
    no_egress = DagRequest([dag.tasks[0], TaskRequest("train", dag.tasks[1].candidates)], [])
    no_egress.tasks[0].output_gb = 0.0
    free = optimize(no_egress, cat)[0]
    assert free.tasks[1].chosen.cloud == "aws"  # cheapest T4 when data need not move
    assert free.total_cost < p.total_cost


def test_time_objective_prefers_faster_accelerator(cat: Catalog) -> None:
    dag = one(A100_8, ResourceRequest(accelerator="H100", accelerator_count=8), estimated_runtime_s=7200)
    assert optimize(dag, cat)[0].tasks[0].chosen.accelerators == {"A100": 8}
    t = optimize(dag, cat, minimize="time")[0]
    assert t.objective == "time" and t.tasks[0].chosen.accelerators in ({"H100": 8}, {"H200": 8})
    assert t.makespan_s == pytest.approx(3600.0)


def test_non_chain_dag_uses_ilp_and_groups(cat: Catalog) -> None:
    t4 = [ResourceRequest(accelerator="T4", accelerator_count=1)]
    dag = DagRequest([
        TaskRequest("a", t4, output_gb=100),
        TaskRequest("b", [A100_8], output_gb=100, group="g"),
        TaskRequest("c", t4, output_gb=100, group="g"),
        TaskRequest("d", t4),
    ], [(0, 1), (0, 2), (1, 3), (2, 3)])
    for objective in ("cost", "time"):
        plans = optimize(dag, cat, minimize=objective)
        b, c = plans[0].tasks[1].chosen, plans[0].tasks[2].chosen
        assert (b.cloud, b.region) == (c.cloud, c.region)
    mi = DagRequest([TaskRequest("x", [ResourceRequest(accelerator="MI300X", accelerator_count=8)], group="g"),
                     TaskRequest("y", [ResourceRequest(cloud="gcp", accelerator="L4", accelerator_count=1)],
                                 group="g")], [])
    with pytest.raises(ResourcesUnavailableError, match="job group .* share a cloud and region"):
        optimize(mi, cat)


def test_plan_json_and_table(cat: Catalog) -> None:
    plan = optimize(one(A100_8), cat)[0]
    doc = json.loads(json.dumps(plan_to_json(plan)))
    assert doc["objective"] == "cost" and doc["total_hourly_cost"] == 10.32
    chosen = doc["tasks"][0]["chosen"]
    assert set(chosen) == {"cloud", "region", "zone", "instance_type", "accelerators", "use_spot",
                           "hourly_cost", "num_nodes"}
    assert chosen["accelerators"] == {"A100": 8} and doc["tasks"][0]["alternatives"]
    table = format_plan_table(plan)
    assert "gpu_8x_a100" in table and "✔" in table and "p4d.24xlarge" in table
    assert "Total: $ 10.32/h" in table


@pytest.mark.anyio
async def test_optimize_async(cat: Catalog) -> None:
    plans = await optimize_async(one(A100_8), cat)
    assert plans[0].tasks[0].chosen.cloud == "lambda"


def test_highs_banner_never_reaches_stdout(tmp_path: Path) -> None:
    code = (
        "from skyd.solver.ilp import new_highs\n"
        "h = new_highs(); h2 = new_highs()\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "ok\n" and "HiGHS" not in out.stderr


def test_ilp_prints_nothing(cat: Catalog, capfd: pytest.CaptureFixture[str]) -> None:
    dag = DagRequest([TaskRequest(n, [A100_8], output_gb=1.0) for n in "abc"], [(0, 1), (0, 2)])
    optimize(dag, cat)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_gpu_listing(cat: Catalog) -> None:
    rows = gpu_listing(cat, "MI300X", 8)
    clouds = [r["cloud"] for r in rows]
    assert len(clouds) == len(set(clouds))  # cheapest per cloud
    assert {"runpod", "vultr", "do", "azure"} <= set(clouds)
    by = {r["cloud"]: r for r in rows}
    assert by["runpod"]["enabled"] and not by["oci"]["enabled"] and by["oci"]["catalog_only"]
    assert by["vultr"]["price"] == 17.52 and by["vultr"]["spot_price"] == 14.72
    every = gpu_listing(cat)
    assert {"MI300X", "H100", "A100", "MI355X"} <= {r["accelerator"] for r in every}
    regions = gpu_listing(cat, "A100", 8, cloud="aws", all_regions=True)
    assert len({r["region"] for r in regions}) > 1 and all(r["cloud"] == "aws" for r in regions)
    assert regions[0]["price"] == 32.7726
    with pytest.raises(NotFoundError, match="did you mean"):
        gpu_listing(cat, "H1000")


def test_registered_runtime_estimator_drives_the_time_objective(cat: Catalog) -> None:
    from skyd.solver import register_runtime_estimator, unregister_runtime_estimator

    req = [ResourceRequest(accelerator="A100", accelerator_count=8),
           ResourceRequest(accelerator="H100", accelerator_count=8)]
    # Say this model runs 10x faster on A100s (e.g. learnt from past runs of the task).
    def est(task: str, acc: str | None, count: float, instance_type: str) -> float | None:
        if task != "train":
            return None
        return 600.0 if acc == "A100" else 6000.0

    register_runtime_estimator(est)
    try:
        best = optimize(DagRequest([TaskRequest("train", req)]), cat, minimize="time")[0]
        assert best.tasks[0].chosen.accelerators == {"A100": 8}
        assert best.makespan_s == pytest.approx(600.0)
        other = optimize(DagRequest([TaskRequest("other", req)]), cat, minimize="time")[0]
        assert other.tasks[0].chosen.accelerators == {"H100": 8}  # the built-in speed model
    finally:
        unregister_runtime_estimator(est)
