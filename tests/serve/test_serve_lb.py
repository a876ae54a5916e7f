"""The load balancer (both listeners) in process, against real HTTP replicas
(tests/fakes/replica_app.py) on loopback; and the autoscalers' decisions."""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import anyio
import pytest

from skyd.serve.autoscalers import autoscaler_for
from skyd.serve.fastlb import FastLoadBalancer
from skyd.serve.lb import LoadBalancer
from tests.fakes.replica_app import serving

pytestmark = pytest.mark.anyio
IMPLS = [FastLoadBalancer, LoadBalancer]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Rig:
    def __init__(self, lb: LoadBalancer, urls: list[str]) -> None:
        self.lb = lb
        self.urls = urls
        self.url = f"http://127.0.0.1:{lb.port}"


async def _rig(cls: type[LoadBalancer], n: int, policy: str, **kw: Any) -> AsyncIterator[Rig]:
    async with AsyncExitStack() as replicas:  # closed after the load balancer has stopped
        urls = [await replicas.enter_async_context(serving(str(i + 1))) for i in range(n)]
        lb = cls("t", host="127.0.0.1", port=_port(), policy=policy, **kw)
        lb.set_replicas([(i + 1, u, 1.0) for i, u in enumerate(urls)])
        async with anyio.create_task_group() as tg:
            await tg.start(lb.serve)
            try:
                yield Rig(lb, urls)
            except GeneratorExit:
                pass  # aclose(): end here, or the task group would raise it wrapped in a group
            finally:
                tg.cancel_scope.cancel()


@pytest.mark.parametrize("cls", IMPLS)
async def test_connect_failure_goes_to_another_replica(cls: type[LoadBalancer]) -> None:
    rigs = _rig(cls, 1, "round_robin")
    rig = await rigs.__anext__()
    try:
        dead = f"http://127.0.0.1:{_port()}"  # nothing listens there
        rig.lb.set_replicas([(1, rig.urls[0], 1.0), (9, dead, 1.0)])
        async with aiohttp.ClientSession() as s:
            for _ in range(6):
                async with s.post(rig.url + "/", data=b"x" * 1000) as r:
                    assert r.status == 200 and await r.text() == "replica 1"
        assert set(rig.lb.stats()["inflight"].values()) == {0}
    finally:
        await rigs.aclose()


@pytest.mark.parametrize("cls", IMPLS)
async def test_body_prefix_affinity_and_chunked_upload(cls: type[LoadBalancer]) -> None:
    rigs = _rig(cls, 3, "affinity", affinity_body_prefix=16)
    rig = await rigs.__anext__()
    try:
        async with aiohttp.ClientSession() as s:
            homes: dict[int, set[str]] = {}
            for i in range(10):
                for j in range(3):
                    prefix = f"system prompt {i:02d}".encode()  # 16 bytes
                    async with s.post(rig.url + "/", data=prefix + f" user {j}".encode()) as r:
                        homes.setdefault(i, set()).add(await r.text())
            assert all(len(v) == 1 for v in homes.values()), homes
            assert len({next(iter(v)) for v in homes.values()}) > 1

            async def body() -> AsyncIterator[bytes]:
                for k in range(5):
                    yield f"part{k};".encode()

            async with s.post(rig.url + "/echo", data=body()) as r:  # chunked upload
                assert await r.text() == "".join(f"part{k};" for k in range(5))
    finally:
        await rigs.aclose()


@pytest.mark.parametrize("cls", IMPLS)
async def test_broken_replica_answer_leaves_counts_exact(cls: type[LoadBalancer]) -> None:
    rigs = _rig(cls, 2, "least_load")
    rig = await rigs.__anext__()
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(4):
                with pytest.raises(aiohttp.ClientError):
                    async with s.get(rig.url + "/cut") as r:
                        await r.read()
            seen = Counter()
            for _ in range(4):
                async with s.get(rig.url + "/") as r:
                    seen[await r.text()] += 1
        assert set(rig.lb.stats()["inflight"].values()) == {0}
        assert seen == {"replica 1": 2, "replica 2": 2}  # no phantom load skews least_load
    finally:
        await rigs.aclose()


@pytest.mark.parametrize("cls", IMPLS)
async def test_no_replica_is_503_with_reason(cls: type[LoadBalancer]) -> None:
    rigs = _rig(cls, 1, "least_load")
    rig = await rigs.__anext__()
    try:
        rig.lb.set_replicas([], "replica 1 is NOT_READY")
        async with aiohttp.ClientSession() as s, s.get(rig.url + "/x") as r:
            assert r.status == 503
            assert "NOT_READY" in await r.text()
    finally:
        await rigs.aclose()


def test_request_rate_autoscaler_waits_out_its_delays() -> None:
    pol = {"min_replicas": 1, "max_replicas": 4, "target_qps_per_replica": 2,
           "upscale_delay_seconds": 10, "downscale_delay_seconds": 30}
    a = autoscaler_for(pol, 1)
    assert a.name == "request_rate"
    assert a.decide(0, 7.0).target == 1  # wants 4, but only just
    assert a.decide(5, 7.0).target == 1
    assert a.decide(6, 1.0).target == 1  # the spike ended: the clock restarts
    assert a.decide(7, 7.0).target == 1
    d = a.decide(17, 7.0)
    assert d.target == 4 and "upscale" in d.reason and d.inputs["qps"] == 7.0
    assert a.decide(20, 100.0).target == 4  # never over max
    assert a.decide(21, 0.0).target == 4
    assert a.decide(50, 0.0).target == 4
    assert a.decide(52, 0.0).target == 1  # idle past the downscale delay; never under min


def test_fixed_autoscaler_when_min_equals_max() -> None:
    a = autoscaler_for({"min_replicas": 3, "max_replicas": 3, "target_qps_per_replica": 1}, 0)
    assert a.name == "fixed" and a.decide(0, 1000.0).target == 3


def test_instance_aware_least_load_weighs_by_target_qps() -> None:
    from skyd.serve.policies import Backend, make_policy

    small, big = Backend(1, "http://127.0.0.1:1", 1.0), Backend(2, "http://127.0.0.1:2", 4.0)
    p = make_policy("instance_aware_least_load")
    p.set_backends([small, big])
    picks = Counter()
    for _ in range(10):  # requests that stay in flight
        b = p.pick((), None)
        assert b is not None
        b.inflight += 1
        picks[b.replica_id] += 1
    assert picks == {1: 2, 2: 8}


@pytest.mark.parametrize("cls", IMPLS)
async def test_port_taken_raises_oserror_to_the_starter(cls: type[LoadBalancer]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        lb = cls("t", host="127.0.0.1", port=s.getsockname()[1], policy="round_robin")
        async with anyio.create_task_group() as tg:
            with pytest.raises(OSError):
                await tg.start(lb.serve)
            tg.cancel_scope.cancel()  # the group itself is unharmed
