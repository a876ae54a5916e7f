"""`cpus: N+` without memory picks what SkyPilot picks: its default instance has 4 GiB per
vCPU (AWS: m6i/r6i, not the cheaper 2 GiB c6i), so the same YAML costs the same."""

from __future__ import annotations

from skyd.clouds.catalog import load_catalog
from skyd.solver import DagRequest, ResourceRequest, TaskRequest, optimize


def _chosen(cloud: str, **req: object) -> tuple[str, float, float]:
    cat = load_catalog().with_enabled([cloud])
    task = TaskRequest(name="t", candidates=[ResourceRequest(**req)])  # type: ignore[arg-type]
    c = optimize(DagRequest(tasks=[task], edges=[]), cat)[0].tasks[0].chosen
    return c.instance_type, c.vcpus, c.memory_gib


def test_cpus_without_memory_take_skypilots_4gib_per_vcpu_default() -> None:
    assert _chosen("aws", cpus=8.0, cpus_plus=True) == ("m6i.2xlarge", 8.0, 32.0)
    assert _chosen("aws", cpus=16.0, cpus_plus=True) == ("m6i.4xlarge", 16.0, 64.0)
    assert _chosen("gcp", cpus=8.0, cpus_plus=True) == ("n2-standard-8", 8.0, 32.0)


def test_memory_the_user_gives_is_honoured() -> None:
    # Asked for less memory: the cheaper compute-optimized family is fine.
    assert _chosen("aws", cpus=8.0, cpus_plus=True, memory_gib=16.0, memory_plus=True) == (
        "c6i.2xlarge", 8.0, 16.0)
