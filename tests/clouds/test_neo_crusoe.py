"""The ``crusoe`` driver against the fake Crusoe API (tests/fakes/crusoeapi.py, which
verifies every request's HMAC signature), in this process: signing, create as an operation
polled to the end (slow operations too), capacity and quota read before creating, each
refusal's failover scope, rate limiting, `forget` by name, credential discovery and
`check`, and the VM types -> catalog rows fetcher. VMs are fake SSH hosts on 127.0.0.x with
real node agents; nothing outside 127.0.0.0/8 is reached."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from skyd.clouds.base import NODE_RUNNING, NODE_TERMINATED, ProvisionRequest
from skyd.clouds.crusoe.api import signature
from skyd.clouds.crusoe.catalog import type_offerings
from skyd.clouds.crusoe.cloud import CrusoeCloud
from skyd.clouds.offering import Offering
from skyd.errors import CredentialsError, ResourcesUnavailableError
from tests.fakes.crusoeapi import TYPES, FakeCrusoe
from tests.fakes.crusoeapi import _sign as fake_sign
from tests.support.gcp import netguard
from tests.support.neo import crusoe_environ

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def cr(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCrusoe]:
    f = FakeCrusoe(tmp_path_factory.mktemp("crusoe"), first_ip=190).start()
    try:
        yield f  # type: ignore[misc]
    finally:
        f.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("crhome")


@pytest.fixture
def env(cr: FakeCrusoe, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for k, v in crusoe_environ(cr, tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("CRUSOE_PROFILE", raising=False)
    monkeypatch.setenv("SKYD_HOME", str(home))
    monkeypatch.setenv("SKYD_CONFIG_DIR", str(tmp_path / "config"))
    cr.clear()
    before = len(netguard.VIOLATIONS)
    yield
    cr.clear()
    assert netguard.VIOLATIONS[before:] == []
    assert cr.live() == [], cr.live()


@pytest.fixture
async def cloud(env: None) -> AsyncIterator[CrusoeCloud]:
    c = CrusoeCloud()
    try:
        yield c
    finally:
        await c.close()


def _req(name: str, itype: str = "mi300x-192gb.8x", region: str = "us-east1-a", *, n: int = 1,
         acc: str = "MI300X") -> ProvisionRequest:
    off = Offering("crusoe", itype, acc, 8, 176, 1920, region, None, 27.6, None)
    return ProvisionRequest(cluster_name=name, num_nodes=n, offering=off, use_spot=False,
                            token="tok-" + name, tag=f"{name}-abc123")


async def _healthy(cloud: CrusoeCloud, handle: Any) -> bool:
    from skyd.nodeagent.client import AgentClient

    for rank in range(len(handle.nodes)):
        host, port = await cloud.provisioner().agent_endpoint(handle, rank)
        async with AgentClient(host, port, handle.token) as c:
            if not await c.health(timeout=10):
                return False
    return True


def test_signature_matches_an_independent_implementation() -> None:
    secret = "c2VjcmV0LWtleS1mb3ItdGVzdHMtb25seQ"
    ts = "2026-12-01T10:00:00+00:00"
    ours = signature(secret, "/v1alpha5/capacities", {"product_name": "mi300x-192gb.8x", "a": "1"}, "get", ts)
    assert ours == fake_sign(secret, "/v1alpha5/capacities", {"a": "1", "product_name": "mi300x-192gb.8x"},
                             "GET", ts)
    assert "=" not in ours and ours != signature(secret, "/v1alpha5/capacities", {}, "GET", ts)


async def test_mi300x8_create_operation_polled_rocm_image_agents_then_down(cloud: CrusoeCloud,
                                                                          cr: FakeCrusoe) -> None:
    prov = cloud.provisioner()
    cr.op_s = 0.5  # a slow operation: polled until SUCCEEDED
    handle = await prov.provision(_req("c1"), lambda _m: None)
    body = cr.creates[-1]
    assert (body["type"], body["location"], body["image"]) == ("mi300x-192gb.8x", "us-east1-a", "ubuntu-rocm:latest")
    assert body["ssh_public_key"].startswith("ssh-ed25519 ") and body["name"] == "c1-abc123-0"
    (node,) = handle.nodes
    assert node.ssh and node.ssh["user"] == "ubuntu" and node.ssh["host"] in cr.handed_out
    assert handle.accelerators == {"MI300X": 8} and handle.region == "us-east1-a"
    assert await _healthy(cloud, handle) and await prov.query(handle) == [NODE_RUNNING]
    assert cr.bad_signatures == 0
    await prov.terminate(handle, lambda _m: None)
    assert await prov.query(handle) == [NODE_TERMINATED]
    await prov.terminate(handle, lambda _m: None)


async def test_mi355x_in_any_location_with_capacity_and_found_again(cloud: CrusoeCloud, cr: FakeCrusoe) -> None:
    prov = cloud.provisioner()
    req = _req("c2", "mi355x-288gb.8x", "default", acc="MI355X")  # the bundled rows' region
    h1 = await prov.provision(req, lambda _m: None)
    assert h1.region == "us-east1-a" and cr.creates[-1]["location"] == "us-east1-a"
    creates = len(cr.creates)
    h2 = await prov.provision(req, lambda _m: None)  # a resumed launch: nothing new
    assert len(cr.creates) == creates and [n.instance_id for n in h1.nodes] == [n.instance_id for n in h2.nodes]
    await prov.terminate(h2, lambda _m: None)


async def test_no_capacity_is_read_before_create_and_an_operation_failure_is_a_region_failure(
    cloud: CrusoeCloud, cr: FakeCrusoe
) -> None:
    prov = cloud.provisioner()
    cr.capacity[("mi300x-192gb.8x", "us-east1-a")] = 0
    creates = len(cr.creates)
    with pytest.raises(ResourcesUnavailableError) as ei:
        await prov.provision(_req("full"), lambda _m: None)
    assert ei.value.scope == "region" and len(cr.creates) == creates  # no create was sent
    cr.clear()
    cr.fail_in_operation("us-east1-a")
    with pytest.raises(ResourcesUnavailableError) as ei:
        await prov.provision(_req("race"), lambda _m: None)
    assert ei.value.scope == "region" and "out_of_stock" in (ei.value.provider_message or "")
    await prov.forget(_req("race").partial())


async def test_quota_is_a_cloud_failure_and_forget_removes_what_was_made(cloud: CrusoeCloud,
                                                                          cr: FakeCrusoe) -> None:
    prov = cloud.provisioner()
    cr.gpu_quota = 8
    with pytest.raises(ResourcesUnavailableError) as ei:
        await prov.provision(_req("q", n=2), lambda _m: None)
    assert ei.value.scope == "cloud" and "quota" in ei.value.message
    # the quota shrinks between the pre-check and the second create: the API refuses it
    req = _req("q2", n=2)
    real = cr._create
    calls = 0

    async def second_over_quota(body: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            cr.gpu_quota = 8
        return await real(body)

    cr.gpu_quota = 16
    cr._create = second_over_quota  # type: ignore[method-assign]
    try:
        with pytest.raises(ResourcesUnavailableError) as ei:
            await prov.provision(req, lambda _m: None)
    finally:
        del cr._create
    assert ei.value.scope == "cloud" and "quota_exceeded" in (ei.value.provider_message or "")
    assert len(cr.live()) == 1
    await prov.forget(req.partial())
    assert cr.live() == []


async def test_rate_limited_requests_are_retried_after_retry_after(cloud: CrusoeCloud, cr: FakeCrusoe) -> None:
    cr.rate_limit(2, retry_after=0.2)
    cr.boot_s = 0.5
    handle = await cloud.provisioner().provision(_req("rl"), lambda _m: None)
    assert cr.rate_limited == 2
    await cloud.provisioner().terminate(handle, lambda _m: None)


async def test_a_wrong_secret_fails_the_signature_check(cloud: CrusoeCloud, cr: FakeCrusoe,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUSOE_SECRET_KEY", "d3Jvbmctc2VjcmV0")
    bad = cr.bad_signatures
    ok, why = await cloud.check()
    assert not ok and "Crusoe refused the keys from $CRUSOE_ACCESS_KEY_ID/$CRUSOE_SECRET_KEY" in why, why
    assert cr.bad_signatures == bad + 1
    with pytest.raises(CredentialsError):
        await cloud.provisioner().provision(_req("bad"), lambda _m: None)
    await cloud.provisioner().forget(_req("bad").partial())


async def test_check_names_the_variables_or_the_config_file(env: None, cr: FakeCrusoe, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("CRUSOE_ACCESS_KEY_ID", "CRUSOE_SECRET_KEY", "CRUSOE_PROJECT_ID"):
        monkeypatch.delenv(k)
    c = CrusoeCloud()
    try:
        ok, why = await c.check()
        assert not ok and "CRUSOE_ACCESS_KEY_ID" in why and "~/.crusoe/config" in why
    finally:
        await c.close()
    cfg = tmp_path / "crusoe-config"
    cfg.write_text(f'[default]\ndefault_project = "default"\naccess_key_id = "{cr.access_key}"\n'
                   f'secret_key = "{cr.secret_key}"\n')
    c = CrusoeCloud()
    try:
        ok, why = await c.check()
        assert ok and f"{cfg} [default]" in why and cr.project in why, why
    finally:
        await c.close()


async def test_catalog_refresh_lists_gpu_types_per_location(env: None, cr: FakeCrusoe) -> None:
    from skyd.clouds.catalog import load_catalog
    from skyd.clouds.catalog_refresh import refresh_catalog

    await refresh_catalog("crusoe")
    rows = {(o.instance_type, o.region): o for o in load_catalog(reload=True).by_cloud("crusoe")}
    assert set(rows) == {("mi300x-192gb.8x", "us-east1-a"), ("mi300x-192gb.8x", "us-southcentral1-a"),
                         ("mi355x-288gb.8x", "us-east1-a")}
    big = rows[("mi300x-192gb.8x", "us-east1-a")]
    assert (big.accelerator, big.accelerator_count, big.price) == ("MI300X", 8.0, 27.6)
    assert rows[("mi355x-288gb.8x", "us-east1-a")].accelerator == "MI355X"
    assert type_offerings([TYPES[-1]], [{"type": "c1a.16x", "location": "us-east1-a"}]) == []  # no GPU
