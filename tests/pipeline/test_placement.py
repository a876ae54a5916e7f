"""One typed offer from the solver to the node: a placement knows the task's resources entry
it came from (any_of / ordered), and the provision request, the task container and the
agent's job spec all read that entry -- never the first one."""

from __future__ import annotations

from typing import Any

import yaml

from skyd.models.loader import task_from_config
from skyd.models.task import Task
from skyd.pipeline import preflight
from skyd.pipeline.jobspec import build_job_spec
from skyd.pipeline.placement import Placement, placements_of
from skyd.pipeline.provision import build_request
from skyd.solver.plan import Choice as SolverChoice

ANY_OF = """\
resources:
  any_of:
    - {accelerators: A100:1, disk_size: 500, labels: {tier: gpu}, ports: [8080],
       image_id: ami-0123456789abcdef0, cpus: 8}
    - {infra: local, disk_size: 100, labels: {tier: cpu}, ports: [9000], cpus: 2}
run: echo
"""


def _task(text: str) -> Task:
    return task_from_config(yaml.safe_load(text))


def _solver_choice(cloud: str, index: int, zones: tuple[str, ...] = (), **kw: Any) -> SolverChoice:
    base: dict[str, Any] = dict(cloud=cloud, region="local" if cloud == "local" else "us-east-1",
                                zone=zones[0] if zones else None, zones=zones, instance_type="local",
                                accelerators={}, use_spot=False, hourly_cost=0.0, num_nodes=1,
                                vcpus=4.0, memory_gib=8.0, runtime_s=3600.0, request_index=index)
    base.update(kw)
    return SolverChoice(**base)


def test_the_chosen_entry_reaches_the_request_and_the_job() -> None:
    task = _task(ANY_OF)
    [placed] = placements_of(_solver_choice("local", 1))
    assert placed.resources_index == 1
    got = placed.resolved(task)
    assert (got.index, got.disk_size, got.labels, got.ports) == (1, 100, (("tier", "cpu"),), ("9000",))
    assert got.image_id is None and got.gpus == 0 and got.cpus == 2.0
    req = build_request(task, "c", "c-1", placed)
    assert req.disk_size == 100 and dict(req.labels) == {"tier": "cpu"} and req.ports == ("9000",)
    assert req.image_id is None
    spec = build_job_spec(task, got, with_setup=True, name="c")
    assert spec.gpus == 0 and spec.cpus == 2.0  # not the A100 entry's GPU and 8 CPUs


def test_every_zone_of_a_choice_keeps_its_entry() -> None:
    task = _task(ANY_OF.replace("infra: local, ", ""))
    placed = placements_of(_solver_choice("aws", 1, zones=("us-east-1a", "us-east-1b")))
    assert [p.offering.zone for p in placed] == ["us-east-1a", "us-east-1b"]
    assert all(p.resources_index == 1 and p.resolved(task).disk_size == 100 for p in placed)


def test_the_first_entry_when_it_is_chosen() -> None:
    task = _task(ANY_OF.replace("infra: local, ", ""))
    [placed] = placements_of(_solver_choice("aws", 0, accelerators={"A100": 1.0}))
    got = placed.resolved(task)
    assert got.disk_size == 500 and got.gpus == 1 and got.gpu_vendor == "nvidia"
    assert got.image_id == "ami-0123456789abcdef0" and got.cpus == 8.0


def test_a_dry_run_row_is_judged_by_its_own_entry() -> None:
    """The dry run's LAUNCH column (preflight) asks of the row's own entry: the `local` row
    came from the second entry, which names no machine image, so it is not refused for the
    first entry's image."""
    task = _task(ANY_OF)
    assert preflight.choice_refusal(task, _solver_choice("local", 1)) is None
    refused = preflight.choice_refusal(task, _solver_choice("local", 0))
    assert refused is not None and "image" in str(refused).lower()


def test_a_placement_without_a_usable_index_falls_back_to_its_infra() -> None:
    from skyd.clouds.offering import Offering

    task = _task(ANY_OF)
    off = Offering(cloud="local", instance_type="local", accelerator=None, accelerator_count=0.0,
                   vcpus=4.0, memory_gib=8.0, region="local", zone=None, price=0.0, spot_price=None)
    assert Placement(off, False, 0.0, 1, 7).resolved(task).index == 1  # the entry pinned to local
    assert Placement(off, False, 0.0, 1, 0).resolved(task).index == 0  # entry 0: unpinned, fits


def test_a_reused_cluster_runs_the_entry_it_has_room_for() -> None:
    """`exec` (or a launch reusing a cluster) on an any_of task: the first entry asks more
    CPUs than the nodes have, so it is not the one the cluster was planned for -- the job
    asks the second entry's CPUs, not a demand no node can meet."""
    from skyd.clouds.base import ClusterHandle
    from skyd.pipeline import fit

    task = _task("resources:\n  any_of:\n    - {cpus: 64}\n    - {infra: local, cpus: 1}\nrun: echo\n")
    handle = ClusterHandle(cluster_name="c", cloud="local", region="local", zone=None,
                           instance_type="local", use_spot=False, accelerators={}, num_nodes=1,
                           hourly_cost=0.0, nodes=[], token="t", cpus=2.0, memory_gib=4.0)
    got = fit.resolved_on(task, handle)
    assert got.index == 1 and got.cpus == 1.0
    assert fit.resolved_on(task, handle, index=0).cpus == 64.0  # the recorded entry wins
    bigger = ClusterHandle(**{**handle.__dict__, "cpus": 96.0})
    assert fit.resolved_on(task, bigger).index == 0  # room for the first: it is served first
