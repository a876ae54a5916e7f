"""The instance_aware autoscaler: target_qps_per_replica per accelerator. Capacity comes
from the replicas' actual accelerators; same hysteresis as request_rate. Pure decisions on
a fake clock, plus the spec's dict form selecting it (and its load-balancing policy)."""

from __future__ import annotations

import pytest

from skyd.errors import InvalidSpecError
from skyd.models.service import ServiceSpec
from skyd.serve import autoscalers, policies
from skyd.serve.autoscalers import Autoscaler, autoscaler_for
from skyd.serve.policies import Policy

POLICY = {"min_replicas": 1, "max_replicas": 6, "target_qps_per_replica": {"A100": 10, "H100": 20},
          "upscale_delay_seconds": 5, "downscale_delay_seconds": 20}


def test_capacity_follows_the_replicas_accelerators() -> None:
    a = autoscaler_for(POLICY, 2)
    assert a.name == "instance_aware"
    # one H100 (20) + one A100 (10) = 30 qps of capacity: 25 qps fits, steady
    d = a.decide(0, 25.0, 0, [20.0, 10.0])
    assert d.target == 2 and d.reason == "steady"
    assert d.inputs["capacity"] == 30 and d.inputs["replica_qps"] == [20, 10]
    # 55 qps: 25 uncovered, priced at the smallest target (10) -> 3 more, after the delay
    d = a.decide(1, 55.0, 0, [20.0, 10.0])
    assert d.target == 2 and d.reason.startswith("upscale to 5 in")
    d = a.decide(6, 55.0, 0, [20.0, 10.0])
    assert d.target == 5 and d.reason == "upscale 2 -> 5 (qps 55.00 vs capacity 30.00)"
    # the new replicas came up as H100s: 4 x 20 + 10 = 90; 35 qps needs the two biggest
    replicas = [20.0, 20.0, 20.0, 10.0, 20.0]
    assert a.decide(7, 35.0, 0, replicas).target == 5  # downscale waits 20 s
    d = a.decide(27, 35.0, 0, replicas)
    assert d.target == 2 and d.reason.startswith("downscale 5 -> 2")


def test_unknown_accelerators_count_at_the_smallest_target_and_clamps_hold() -> None:
    a = autoscaler_for(POLICY, 1)
    d = a.decide(0, 15.0, 0, [None])  # still provisioning: priced at 10
    assert d.inputs["capacity"] == 10 and "upscale to 2" in d.reason
    assert a.decide(5, 15.0, 0, [None]).target == 2
    assert a.decide(6, 1000.0, 0, [10.0, 10.0]).target == 2
    assert a.decide(11, 1000.0, 0, [10.0, 10.0]).target == 6  # never over max
    assert a.decide(12, 0.0, 0, [20.0] * 6).target == 6
    assert a.decide(32, 0.0, 0, [20.0] * 6).target == 1  # never under min


def test_spec_dict_form_loads_and_selects_instance_aware() -> None:
    svc = ServiceSpec.model_validate({
        "readiness_probe": "/health",
        "replica_policy": {"min_replicas": 1, "max_replicas": 3,
                           "target_qps_per_replica": {"a100": 10, "H100:8": 20}}})
    pol = svc.model_dump(mode="json")["replica_policy"]
    assert pol["target_qps_per_replica"] == {"A100": 10, "H100:8": 20}
    assert svc.load_balancing_policy == "instance_aware_least_load"
    assert autoscaler_for(pol, 1).name == "instance_aware"
    assert autoscaler_for({**pol, "target_qps_per_replica": 5}, 1).name == "request_rate"


@pytest.mark.parametrize(("tq", "msg"), [
    ({"A1OO": 10}, "unknown accelerator 'A1OO'"),
    ({"A100": 0}, "must be a number > 0"),
    ({"A100": "fast"}, "must be a number > 0"),
    ({"A100:x": 3}, "bad accelerator count"),
    ({}, "empty mapping"),
])
def test_spec_dict_form_rejects_bad_entries(tq: dict[str, object], msg: str) -> None:
    from skyd.models.loader import task_from_config

    with pytest.raises(InvalidSpecError, match=msg) as e:
        task_from_config({"run": "true", "service": {
            "readiness_probe": "/", "replica_policy": {"min_replicas": 1, "max_replicas": 2,
                                                        "target_qps_per_replica": tq}}})
    assert "target_qps_per_replica" in (e.value.field or "")


def test_every_autoscaler_and_policy_implements_the_abstract_method() -> None:
    with pytest.raises(TypeError):
        Autoscaler({}, 0)  # type: ignore[abstract]
    with pytest.raises(TypeError):
        Policy()  # type: ignore[abstract]
    for make in autoscalers.AUTOSCALERS.values():
        assert make(POLICY, 1).decide(0, 0.0).target >= 0
    for name in policies.POLICIES:
        assert policies.make_policy(name).pick((), None) is None  # no backend yet
