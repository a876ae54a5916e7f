"""Kubernetes pods prove their GPUs before the cluster is UP: the agent in the pod detects what
the device plugin and the image let it see (tests/fakes/kubeapi.py: nvidia-smi on any image,
amd-smi only on a ROCm image; the card is the one installed on the node, whatever its labels
say). A pod short of the ordered GPUs fails the attempt, the pod is deleted and the launch fails
over; a user image without ROCm ends the launch naming the image and the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.kubeapi import FakeKube, gpu_node
from tests.support.gcp import GEnv
from tests.support.kube import Kubes, kube_module_env, two_kubes
from tests.support.launches import launch_events
from tests.support.pipeline import cli, write


def _nodes(a: FakeKube, b: FakeKube) -> None:
    # a-lab's node is labelled L40S, but the card in it is an A100 (a hand-set label gone stale)
    a.add_node(gpu_node("l40s-a", {"nvidia.com/gpu.product": "NVIDIA-L40S"}, gpus={"nvidia.com/gpu": 2}))
    a.cards["l40s-a"] = "A100-80GB"
    b.add_node(gpu_node("l40s-b", {"nvidia.com/gpu.product": "NVIDIA-L40S"}, gpus={"nvidia.com/gpu": 2}))
    b.add_node(gpu_node("mi300-b", {"amd.com/gpu.device-id": "74a1"}, gpus={"amd.com/gpu": 8}))


@pytest.fixture(scope="module")
def kubes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubes]:
    with two_kubes(tmp_path_factory, _nodes) as k:
        yield k


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, kubes: Kubes) -> Iterator[GEnv]:
    with kube_module_env(tmp_path_factory, kubes) as e:
        yield e


def test_pod_showing_another_card_fails_over_to_the_context_that_has_it(
    env: GEnv, kubes: Kubes, tmp_path: Path
) -> None:
    a, b = kubes
    y = write(tmp_path / "only-a.yaml", "resources:\n  infra: k8s/a-lab\n  accelerators: L40S:1\nrun: echo x\n")
    r = cli("launch", "-y", "-c", "kl-a", str(y), timeout=180)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r
    # the pod's agent saw the node's real card: the message names it and the image
    assert "kubernetes/a-lab" in r.stderr and "L40S:1" in r.stderr and "A100-80GB:1" in r.stderr, r.stderr
    assert "nvidia/cuda" in r.stderr, r.stderr
    assert a.live() == [] and env.status("kl-a") is None  # the pod was deleted, nothing saved

    evs = launch_events(tmp_path, "kl", "resources:\n  infra: k8s\n  accelerators: L40S:1\n"
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
    env: GEnv, kubes: Kubes, tmp_path: Path
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
