"""The fake Kubernetes API checks pod and service bodies against core/v1 as the
kubernetes_asyncio client's generated models describe it (tests/fakes/specs.py): what skyd
sends fits, a misnamed field or a wrong type does not."""

from __future__ import annotations

import copy

from skyd.clouds.kubernetes.pods import pod_manifest
from tests.fakes.kubeapi import kube_spec


def _pod() -> dict:
    return pod_manifest(name="c-0", tag="c-abc", rank=0, namespace="default", image="img", cpus=2,
                        memory_gib=8, gpu_key="amd.com/gpu", gpus=8,
                        terms=[{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}],
                        spot=True, labels=(("team", "ml"),), service="c-abc")


def test_skyds_pod_fits_the_core_v1_models() -> None:
    spec = kube_spec()
    assert "kubernetes_asyncio" in spec.source and spec.version
    assert spec.check(_pod(), "V1Pod") == []


def test_a_misread_field_or_type_is_refused() -> None:
    spec = kube_spec()
    bad = copy.deepcopy(_pod())
    bad["spec"]["node_selector"] = {"a": "b"}  # snake case: the API's field is nodeSelector
    bad["spec"]["containers"][0]["ports"] = [{"containerPort": "8080"}]  # int32, not a string
    bad["spec"]["containers"][0]["resources"]["limits"]["cpu"] = 2  # a number is a valid quantity
    errs = spec.check(bad, "V1Pod", "pod")
    assert "pod.spec.node_selector: unknown field (not in kubernetes_asyncio models)" in errs, errs
    assert any("containerPort: expected an integer" in e for e in errs), errs
    assert not any("limits.cpu" in e for e in errs), errs
