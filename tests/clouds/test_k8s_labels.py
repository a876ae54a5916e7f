"""Accelerator discovery from Kubernetes node labels (skyd.clouds.kubernetes.labels)."""

from __future__ import annotations

import pytest

from skyd.clouds.kubernetes import inventory
from skyd.clouds.kubernetes.labels import node_gpus
from tests.fakes.kubeapi import gpu_node


@pytest.mark.parametrize(("labels", "gpus", "want"), [
    ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": 8}, ("H100", 8)),
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, {"nvidia.com/gpu": 4}, ("A100-80GB", 4)),
    ({"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}, {"nvidia.com/gpu": 1}, ("T4", 1)),
    ({"cloud.google.com/gke-accelerator": "nvidia-l4"}, {"nvidia.com/gpu": 2}, ("L4", 2)),
    ({"karpenter.k8s.aws/instance-gpu-name": "a10g"}, {"nvidia.com/gpu": 1}, ("A10G", 1)),
    ({"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}, {"amd.com/gpu": 8}, ("MI300X", 8)),
    ({"amd.com/gpu.product-name": "AMD_Instinct_MI308"}, {"amd.com/gpu": 8}, ("MI308X", 8)),
    ({"amd.com/gpu.product-name": "Instinct_MI210"}, {"amd.com/gpu": 2}, ("MI210", 2)),
    ({"beta.amd.com/gpu.device-id.74a5": "8"}, {}, ("MI325X", 8)),
    ({"beta.amd.com/gpu.device-id.75a3": "8"}, {"amd.com/gpu": 8}, ("MI355X", 8)),
    ({"amd.com/gpu.device-id": "0x740c"}, {"amd.com/gpu": 4}, ("MI250", 4)),
    # a device id wins over a product name that lacks the X
    ({"amd.com/gpu.device-id": "74a1", "amd.com/gpu.product-name": "AMD_Instinct_MI300"},
     {"amd.com/gpu": 8}, ("MI300X", 8)),
    ({"amd.com/gpu.device-id": "74a0"}, {"amd.com/gpu": 4}, ("MI300A", 4)),
])
def test_node_labels_map_to_canonical_names(labels: dict[str, str], gpus: dict[str, int],
                                            want: tuple[str, int]) -> None:
    got = node_gpus(gpu_node("n", labels, gpus=gpus))
    assert [(g.accelerator, g.count) for g in got] == [want]


def test_mixed_vendor_node_offers_both() -> None:
    n = gpu_node("mix", {"nvidia.com/gpu.product": "NVIDIA-L4", "amd.com/gpu.device-id": "74a1"},
                 gpus={"nvidia.com/gpu": 2, "amd.com/gpu": 8})
    got = {(g.accelerator, g.key, g.count) for g in node_gpus(n)}
    assert got == {("L4", "nvidia.com/gpu", 2), ("MI300X", "amd.com/gpu", 8)}


def test_gpus_in_use_counted_from_live_pods_in_every_namespace() -> None:
    nodes = {"items": [gpu_node("a", {"amd.com/gpu.device-id": "74a1"}, gpus={"amd.com/gpu": 8})]}

    def pod(ns: str, phase: str, n: int) -> dict[str, object]:
        return {"metadata": {"namespace": ns}, "spec": {"nodeName": "a", "containers": [
            {"resources": {"limits": {"amd.com/gpu": str(n)}}}]}, "status": {"phase": phase}}

    pods = {"items": [pod("team-a", "Running", 2), pod("team-b", "Pending", 1), pod("x", "Succeeded", 4),
                      pod("y", "Failed", 4)]}
    assert inventory.gpu_summary(inventory.build(nodes, pods)) == {
        "MI300X": {"total": 8, "free": 5, "max_per_node": 8}}
