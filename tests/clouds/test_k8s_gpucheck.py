"""Kubernetes pods prove their GPUs before the cluster is UP: the agent in the pod detects what
the device plugin and the image let it see (tests/fakes/kubeapi.py: nvidia-smi on any image,
amd-smi only on a ROCm image; the card is the one installed on the node, whatever its labels
say). A pod short of the ordered GPUs fails the attempt, the pod is deleted and the launch fails
over; a user image without ROCm ends the launch naming the image and the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyd.sdk.transport import Client
from tests.fakes.kubeapi import FakeKube, gpu_node
from tests.support.gcp import GEnv, guarded_module_env
from tests.support.pipeline import cli, write


@pytest.fixture(scope="module")
def kubes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeKube, FakeKube]]:
    a = FakeKube(tmp_path_factory.mktemp("kube-a")).start()
    b = FakeKube(tmp_path_factory.mktemp("kube-b")).start()
    # a-lab's node is labelled L40S, but the card in it is an A100 (a hand-set label gone stale)
    a.add_node(gpu_node("l40s-a", {"nvidia.com/gpu.product": "NVIDIA-L40S"}, gpus={"nvidia.com/gpu": 2}))
    a.cards["l40s-a"] = "A100-80GB"
    b.add_node(gpu_node("l40s-b", {"nvidia.com/gpu.product": "NVIDIA-L40S"}, gpus={"nvidia.com/gpu": 2}))
    b.add_node(gpu_node("mi300-b", {"amd.com/gpu.device-id": "74a1"}, gpus={"amd.com/gpu": 8}))
    try:
        yield a, b
    finally:
        left = a.live() + b.live()
        a.stop()
        b.stop()
    assert not left, f"objects left on the fakes: {left}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, kubes: tuple[FakeKube, FakeKube]) -> Iterator[GEnv]:
    a, b = kubes
    base = tmp_path_factory.mktemp("k8sgpu")
    cfg = a.kubeconfig(base / "kubeconfig", {"a-lab": "skyd", "b-lab": "skyd"}, servers={"b-lab": b.url})
    log = base / "netguard.log"
    env_vars = {"KUBECONFIG": str(cfg), "SKYD_K8S_POLL_S": "0.1", "SKYD_PROVISION_TIMEOUT_S": "90"}
    with guarded_module_env(tmp_path_factory, log, env_vars) as e:
        yield e


def _launch(tmp_path: Path, name: str, text: str) -> list[dict[str, Any]]:
    y = write(tmp_path / f"{name}.yaml", text)
    with Client(autostart=False) as c:
        rid = c.submit("launch", {"yaml": y.read_text(), "yaml_path": str(y),
                                  "base_dir": str(tmp_path), "cluster_name": name})
        return list(c.events(rid, True))


def test_pod_showing_another_card_fails_over_to_the_context_that_has_it(
    env: GEnv, kubes: tuple[FakeKube, FakeKube], tmp_path: Path
) -> None:
    a, b = kubes
    y = write(tmp_path / "only-a.yaml", "resources:\n  infra: k8s/a-lab\n  accelerators: L40S:1\nrun: echo x\n")
    r = cli("launch", "-y", "-c", "kl-a", str(y), timeout=180)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r
    # the pod's agent saw the node's real card: the message names it and the image
    assert "kubernetes/a-lab" in r.stderr and "L40S:1" in r.stderr and "A100-80GB:1" in r.stderr, r.stderr
    assert "nvidia/cuda" in r.stderr, r.stderr
    assert a.live() == [] and env.status("kl-a") is None  # the pod was deleted, nothing saved

    evs = _launch(tmp_path, "kl", "resources:\n  infra: k8s\n  accelerators: L40S:1\n"
                                  "run: echo gpu-ok cuda=$CUDA_VISIBLE_DEVICES\n")
    assert evs[-1]["type"] == "result", "\n".join(str(e) for e in evs if e.get("type") != "log")
    row = env.status("kl")
    assert row is not None and row["status"] == "UP" and row["region"] == "b-lab", row
    failed = [e for e in evs if e.get("type") == "stage" and e.get("name") == "PROVISION"
              and e.get("state") == "failed"]
    # a-lab (first in the kubeconfig) was tried: its pod failed the GPU check, was removed, and
    # the launch went on to b-lab
    assert [(str(e["target"]).split()[0], e["scope"]) for e in failed] == [("kubernetes/a-lab", "zone")], failed
    assert "A100-80GB:1" in failed[0]["error"] and "nvidia/cuda" in failed[0]["error"], failed
    assert a.live() == []
    env.ok("down", "kl", "-y")
    assert b.live() == []


def test_amd_pod_on_an_image_without_rocm_names_the_image_and_the_field(
    env: GEnv, kubes: tuple[FakeKube, FakeKube], tmp_path: Path
) -> None:
    a, b = kubes
    y = write(tmp_path / "amd.yaml", "resources:\n  infra: k8s/b-lab\n  accelerators: MI300X:8\n"
                                     "  image_id: docker:ubuntu:22.04\nrun: echo never\n")
    r = cli("launch", "-y", "-c", "knorocm", str(y), timeout=180)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r
    assert "ubuntu:22.04" in r.stderr and "resources.image_id" in r.stderr and "ROCm" in r.stderr, r.stderr
    assert b.live() == [] and env.status("knorocm") is None
    # the default AMD image (ROCm) shows the 8 GPUs: UP, the job sees them
    y = write(tmp_path / "amd-ok.yaml", "resources:\n  infra: k8s/b-lab\n  accelerators: MI300X:8\n"
                                        "run: echo n=$SKYPILOT_NUM_GPUS_PER_NODE\n")
    r = env.ok("launch", "-y", "-c", "krocm", str(y), timeout=180)
    assert "n=8" in r.stdout, r.stdout
    env.ok("down", "krocm", "-y")
    assert a.live() == [] and b.live() == []
