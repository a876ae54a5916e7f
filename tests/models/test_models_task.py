"""Task/Resources/Dag behaviour: validators, CLI overrides, copy, DAG shape, import cost."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from skyd.errors import InvalidSpecError
from skyd.models import (
    Autostop,
    Dag,
    JobRecovery,
    Resources,
    Task,
    load_task,
    register_task_validator,
)
from skyd.models.task import _VALIDATORS


def task(text: str) -> Task:
    return load_task("t.yaml", text=text)


# ---------------------------------------------------------------- validators

def test_nvidia_tooling_on_amd_only_warns() -> None:
    t = task("resources:\n  accelerators: {MI300X: 8, MI325X: 8}\n"
             "setup: nvcc --version\nrun: nvidia-smi && CUDA_VISIBLE_DEVICES=0 python x.py\n")
    w = t.validate()
    assert len(w) == 2
    assert w[0].startswith("setup uses NVIDIA tooling (nvcc)")
    assert "CUDA_VISIBLE_DEVICES, nvidia-smi" in w[1] and "MI300X, MI325X" in w[1]


def test_rocm_tooling_on_nvidia_only_warns() -> None:
    t = task("resources:\n  accelerators: H100:8\nrun: rocm-smi; HIP_VISIBLE_DEVICES=0 hipcc a.cpp\n")
    (w,) = t.validate()
    assert "AMD ROCm tooling (HIP_VISIBLE_DEVICES, hipcc, rocm-smi)" in w and "H100" in w


@pytest.mark.parametrize("text", [
    "resources:\n  accelerators: {MI300X: 8, H100: 8}\nrun: nvidia-smi\n",  # mixed vendors
    "resources:\n  accelerators: MI300X:8\nrun: rocm-smi\n",  # matching tooling
    "run: nvidia-smi\n",  # CPU-only candidate: nothing to compare against
    "resources:\n  accelerators: MI300X:8\nrun: echo my-nvidia-smi-log\n",  # word boundary
])
def test_no_warning(text: str) -> None:
    assert task(text).validate() == []


def test_register_task_validator_runs_and_is_idempotent() -> None:
    def long_run(t: Task) -> list[str]:
        return ["run is long"] if t.run and len(t.run) > 10 else []

    try:
        assert register_task_validator(long_run) is long_run
        register_task_validator(long_run)
        assert _VALIDATORS.count(long_run) == 1
        assert task("run: echo 0123456789\n").validate() == ["run is long"]
        assert task("run: ls\n").validate() == []
    finally:
        _VALIDATORS.remove(long_run)


# ---------------------------------------------------------------- overrides

BASE = """
resources:
  cpus: 8+
  any_of:
    - accelerators: A100:8
      infra: aws
    - accelerators: H100:8
      infra: aws
    - accelerators: L4:1
      infra: gcp
run: x
"""


def test_gpus_override_replaces_accelerator_set() -> None:
    t = task(BASE).with_overrides(gpus="MI300X:4")
    got = [(r.infra, r.accelerators) for r in t.resources]
    assert got == [("aws", {"MI300X": 4}), ("gcp", {"MI300X": 4})]
    t2 = task(BASE).with_overrides(gpus="[H200:8, B200:8]", infra="*/us-east-1")
    assert t2.resources_ordered
    assert [(r.infra, r.accelerators) for r in t2.resources] == [
        ("*/us-east-1", {"H200": 8}), ("*/us-east-1", {"B200": 8})]
    assert all(r.cpus == "8+" for r in t2.resources)


def test_resource_overrides_apply_to_every_candidate() -> None:
    t = task(BASE).with_overrides(cpus=16, memory="64GB+", use_spot=True, disk_size="1TB",
                                  ports=8080, image_id="docker:img", instance_type="p4d",
                                  job_recovery="failover", num_nodes=3, name="renamed")
    assert t.num_nodes == 3 and t.name == "renamed"
    for r in t.resources:
        assert (r.cpus, r.memory, r.use_spot, r.disk_size, r.ports, r.docker_image,
                r.instance_type) == ("16", "64+", True, 1024, ["8080"], "img", "p4d")
        assert r.job_recovery == JobRecovery(strategy="FAILOVER")
    assert len(t.resources) == 3


def test_override_errors_name_the_flag() -> None:
    t = task(BASE)
    with pytest.raises(InvalidSpecError) as ei:
        t.with_overrides(gpus="A100:x")
    assert ei.value.field == "--gpus"
    with pytest.raises(InvalidSpecError) as ei:
        t.with_overrides(disk_size=-1)
    assert ei.value.field == "--disk-size"
    with pytest.raises(InvalidSpecError) as ei:
        t.with_overrides(infra="nowhere/x")
    assert ei.value.field == "--infra" and ei.value.hint
    with pytest.raises(InvalidSpecError) as ei:
        t.with_overrides(num_nodes=0)
    assert ei.value.field == "--num-nodes"


def test_with_overrides_leaves_original_alone() -> None:
    t = task(BASE)
    before = t.to_normalized()
    t.with_overrides(gpus="T4", cpus=2)
    assert t.to_normalized() == before


# ---------------------------------------------------------------- Resources

def test_resources_immutable_and_copy() -> None:
    r = Resources.model_validate({"accelerators": "h100:8", "infra": "aws/us-east-1"})
    assert r.accelerators == {"H100": 8} and r.infra == "aws/us-east-1"
    with pytest.raises(ValidationError, match="frozen"):
        r.cpus = "4"  # type: ignore[misc]
    with pytest.raises(InvalidSpecError) as ei:
        r.copy(disk_size="-3GB")
    assert ei.value.field == "disk_size"
    r2 = r.copy(infra="gcp")
    assert (r2.cloud, r2.region, r2.infra) == ("gcp", None, "gcp")
    assert r.copy(region="us-west-2").infra == "aws/us-west-2"
    assert r.copy(cpus=4.0).cpus == "4"
    assert r == Resources.from_normalized(json.loads(json.dumps(r.to_normalized())))


def test_resources_defaults() -> None:
    r = Resources()
    assert (r.disk_size, r.use_spot, r.infra, r.accelerator) == (256, False, None, None)


def test_resources_rejects_sets() -> None:
    with pytest.raises(ValidationError, match="one accelerator type"):
        Resources.model_validate({"accelerators": {"A100": 8, "H100": 8}})


def test_docker_image_property() -> None:
    def img(v: object) -> str | None:
        return Resources.model_validate({"image_id": v}).docker_image

    assert img("docker:vllm/vllm:latest") == "vllm/vllm:latest"
    assert img("ami-123") is None
    assert img({"us-east-1": "docker:a"}) == "a"


def test_autostop_forms() -> None:
    assert Autostop.model_validate(False).enabled is False
    assert Autostop.model_validate("2h").idle_minutes == 120
    assert Autostop.model_validate({"idle_minutes": "1h", "down": True}).idle_minutes == 60
    with pytest.raises(ValidationError, match="unknown field 'idle'"):
        Autostop.model_validate({"idle": 3})


def test_resources_ordered_list_and_legacy_conflict() -> None:
    t = task("resources:\n  accelerators: [H100:8, A100:8]\n")
    assert t.resources_ordered and [r.accelerator for r in t.resources] == [
        ("H100", 8), ("A100", 8)]
    with pytest.raises(InvalidSpecError, match="conflicts with cloud"):
        task("resources:\n  infra: aws\n  cloud: gcp\n")


def test_any_of_location_replaces_base() -> None:
    t = task("resources:\n  cloud: aws\n  region: us-east-1\n"
             "  any_of:\n    - infra: gcp\n    - accelerators: T4\n")
    assert [r.infra for r in t.resources] == ["gcp", "aws/us-east-1"]


def test_num_nodes_and_types() -> None:
    with pytest.raises(InvalidSpecError, match="num_nodes"):
        task("num_nodes: true\n")
    with pytest.raises(InvalidSpecError) as ei:
        task("name: [1]\n")
    assert ei.value.field == "name" and ei.value.line == 1


# ---------------------------------------------------------------- Dag

def test_dag_shapes() -> None:
    a, b, c = (Task(name=n) for n in "abc")
    assert Dag([a]).is_chain()
    assert Dag.chain([a, b, c]).is_chain()
    assert Dag([a, b, c], [(1, 0), (2, 1)]).is_chain()
    assert not Dag([a, b, c], [(0, 1), (0, 2)]).is_chain()
    assert not Dag([a, b, c], [(0, 1)]).is_chain()
    with pytest.raises(InvalidSpecError, match="cycle"):
        Dag([a, b], [(0, 1), (1, 0)])
    with pytest.raises(InvalidSpecError, match="bad edge"):
        Dag([a], [(0, 3)])
    d = Dag([a, b, c], [(0, 1), (0, 2)], name="fan")
    norm = d.to_normalized()
    assert norm["edges"] == [[0, 1], [0, 2]] and norm["name"] == "fan"
    assert Dag.from_normalized(json.loads(json.dumps(norm))) == d


def test_leading_name_document_is_dag_name() -> None:
    from skyd.models import load_dag

    d = load_dag("t.yaml", text="name: pipe\n---\nrun: a\n---\nrun: b\n")
    assert d.name == "pipe" and len(d.tasks) == 2 and d.edges == [(0, 1)]
    # a single document with only name: is a task, not a DAG header
    d1 = load_dag("t.yaml", text="name: solo\n")
    assert d1.task.name == "solo" and d1.to_normalized()["name"] == "solo"


def test_import_is_light() -> None:
    code = ("import sys, skyd.models; bad = [m for m in ('aiohttp', 'anyio', 'highspy', "
            "'textual', 'rich', 'asyncssh', 'grpclib', 'betterproto', 'aiosqlite') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


@pytest.mark.parametrize("alias", ["amd-dev-cloud", "amd_dev_cloud", "amddevcloud"])
def test_amd_developer_cloud_aliases_name_its_own_provider(alias: str) -> None:
    """AMD Developer Cloud is its own provider (amddevcloud), not DigitalOcean's `do`."""
    from skyd.models.parsing import parse_infra

    assert parse_infra(f"{alias}/atl1")[0] == "amddevcloud"
    assert parse_infra("digitalocean")[0] == "do"
