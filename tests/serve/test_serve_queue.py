"""The queue_length autoscaler: its decision comes from the requests the load balancer has
in flight (slow streams held open), with the same hysteresis as request_rate."""

from __future__ import annotations

from contextlib import asynccontextmanager

import aiohttp
import anyio
import pytest
from pydantic import ValidationError

from skyd.models.service import ReplicaPolicy
from skyd.serve.autoscalers import AUTOSCALERS, autoscaler_for
from skyd.serve.fastlb import FastLoadBalancer
from tests.serve.test_serve_lb import _rig as _rig_gen

_rig = asynccontextmanager(_rig_gen)

pytestmark = pytest.mark.anyio
POLICY = {"min_replicas": 1, "max_replicas": 5, "target_queue_length_per_replica": 2,
          "upscale_delay_seconds": 5, "downscale_delay_seconds": 20}


def test_policy_accepts_a_queue_target_instead_of_qps() -> None:
    p = ReplicaPolicy.model_validate({"min_replicas": 1, "max_replicas": 3,
                                      "target_queue_length_per_replica": 4})
    assert p.target_queue_length_per_replica == 4
    with pytest.raises(ValidationError, match="target_qps_per_replica"):
        ReplicaPolicy.model_validate({"min_replicas": 1, "max_replicas": 3})
    assert "queue_length" in AUTOSCALERS


async def test_queue_length_scales_on_in_flight_requests() -> None:
    a = autoscaler_for(POLICY, 1)
    assert a.name == "queue_length"
    async with _rig(FastLoadBalancer, 1, "least_load") as rig, aiohttp.ClientSession() as s:
        lb = rig.lb
        held: list[aiohttp.ClientResponse] = []
        for _ in range(7):  # seven slow token streams, headers read, bodies still coming
            held.append(await s.get(rig.url + "/stream?n=3&delay=2"))
        inflight = sum(b.inflight for b in lb.backends.values())
        assert inflight == 7
        d = a.decide(0, lb.qps(), inflight)
        assert d.target == 1 and "upscale to 4" in d.reason and d.inputs["inflight"] == 7
        d = a.decide(6, lb.qps(), inflight)
        assert d.target == 4 and "upscale 1 -> 4 (7 in flight)" == d.reason
        for r in held:
            r.close()
        with anyio.fail_after(5):
            while sum(b.inflight for b in lb.backends.values()):
                await anyio.sleep(0.02)
        assert a.decide(7, lb.qps(), 0).target == 4  # idle, but not for long enough
        d = a.decide(28, lb.qps(), 0)
        assert d.target == 1 and d.reason.startswith("downscale 4 -> 1")
