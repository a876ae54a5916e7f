"""The ``do`` and ``amddevcloud`` drivers against the fake DigitalOcean API
(tests/fakes/doapi.py), in this process: the droplet create body (size, ROCm image, skyd's
SSH key, cluster tag), agents answering on droplets that are fake SSH hosts on 127.0.0.x,
each refusal's failover scope, rate limiting with Retry-After, slow boots, `forget` by tag,
credential discovery and `check`, and the sizes -> catalog rows fetcher. Nothing outside
127.0.0.0/8 is reached (the network guard refuses it; each test asserts nothing was)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from skyd.clouds.base import NODE_RUNNING, NODE_TERMINATED, ProvisionRequest
from skyd.clouds.do import config, sizes
from skyd.clouds.do.catalog import size_offerings
from skyd.clouds.do.cloud import AMDDevCloud, DOCloud
from skyd.clouds.offering import Offering
from skyd.errors import CredentialsError, ResourcesUnavailableError, SkydError
from tests.fakes.doapi import AMD_SIZES, FakeDO
from tests.fakes.vmapi import free_port
from tests.support.gcp import netguard
from tests.support.neo import do_environ

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeDO, FakeDO]]:
    port = free_port()
    do = FakeDO(tmp_path_factory.mktemp("do"), first_ip=150, ssh_port=port).start()
    amd = FakeDO(tmp_path_factory.mktemp("amd"), first_ip=170, ssh_port=port, token="amd-fake",
                 regions=("atl1",), sizes=AMD_SIZES).start()
    try:
        yield do, amd  # type: ignore[misc]
    finally:
        do.stop()
        amd.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dohome")  # one SKYD_HOME: the agent zipapp is built once


@pytest.fixture
def env(fakes: tuple[FakeDO, FakeDO], home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    do, amd = fakes
    for k, v in do_environ(do, amd, tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("DIGITALOCEAN_ACCESS_TOKEN", raising=False)
    monkeypatch.setenv("SKYD_HOME", str(home))
    monkeypatch.setenv("SKYD_CONFIG_DIR", str(tmp_path / "config"))
    do.clear()
    amd.clear()
    before = len(netguard.VIOLATIONS)
    yield
    do.clear()
    amd.clear()
    assert netguard.VIOLATIONS[before:] == []
    assert do.live() == [] and amd.live() == [], (do.live(), amd.live())


@pytest.fixture
async def cloud(env: None) -> AsyncIterator[DOCloud]:
    c = DOCloud()
    try:
        yield c
    finally:
        await c.close()


def _req(name: str, itype: str = "gpu-mi300x8-1536gb", region: str = "nyc1", *, cloud: str = "do",
         n: int = 1, count: float = 8, **kw: Any) -> ProvisionRequest:
    off = Offering(cloud, itype, "MI300X", count, 160, 1920, region, None, 15.92, None)
    return ProvisionRequest(cluster_name=name, num_nodes=n, offering=off, use_spot=False,
                            token="tok-" + name, tag=f"{name}-abc123", **kw)


async def _healthy(cloud: DOCloud, handle: Any) -> bool:
    from skyd.nodeagent.client import AgentClient

    for rank in range(len(handle.nodes)):
        host, port = await cloud.provisioner().agent_endpoint(handle, rank)
        assert host.startswith("127.")
        async with AgentClient(host, port, handle.token) as c:
            if not await c.health(timeout=10):
                return False
    return True


def test_size_slugs_and_gpu_models_map_to_canonical_counts() -> None:
    assert sizes.from_slug("gpu-mi300x1-192gb") == ("MI300X", 1)
    assert sizes.from_slug("gpu-mi300x8-1536gb") == ("MI300X", 8)
    assert sizes.from_slug("gpu-mi300x1-192gb-devcloud") == ("MI300X", 1)
    assert sizes.from_slug("gpu-mi325x1-256gb") == ("MI325X", 1)
    assert sizes.from_slug("gpu-h100x8-640gb") == ("H100", 8)
    assert sizes.from_slug("s-2vcpu-4gb") is None
    assert sizes.canonical("amd_mi300x") == "MI300X" and sizes.canonical("MI355X_288GB") == "MI355X"
    assert sizes.canonical("MI300X-192GB") == "MI300X"


async def test_mi300x8_droplet_with_rocm_image_agents_answer_then_down(
    cloud: DOCloud, fakes: tuple[FakeDO, FakeDO]
) -> None:
    do, _ = fakes
    prov = cloud.provisioner()
    handle = await prov.provision(_req("d1", labels=(("team", "ml research"),)), lambda _m: None)
    body = do.creates[-1]
    assert (body["size"], body["region"], body["image"]) == ("gpu-mi300x8-1536gb", "nyc1", "gpu-amd-base")
    assert body["tags"][0] == "skyd-cluster:d1-abc123" and "team:ml_research" in body["tags"]
    assert body["ssh_keys"] == list(do.keys)  # skyd's key, registered once
    (node,) = handle.nodes
    assert node.ssh and node.ssh["user"] == "root" and node.ssh["host"] in do.handed_out
    assert handle.accelerators == {"MI300X": 8} and handle.cloud == "do" and handle.zone is None
    assert await _healthy(cloud, handle)
    assert await prov.query(handle) == [NODE_RUNNING]
    with pytest.raises(SkydError, match="not supported on do") as ei:
        await prov.stop(handle, lambda _m: None)
    assert "skyd down d1" in (ei.value.hint or "")
    await prov.terminate(handle, lambda _m: None)
    assert await prov.query(handle) == [NODE_TERMINATED]
    await prov.terminate(handle, lambda _m: None)  # idempotent


async def test_two_nodes_found_again_by_tag_and_a_second_key_registration_is_skipped(
    cloud: DOCloud, fakes: tuple[FakeDO, FakeDO]
) -> None:
    do, _ = fakes
    prov = cloud.provisioner()
    req = _req("two", "gpu-mi300x1-192gb", n=2, count=1)
    h1 = await prov.provision(req, lambda _m: None)
    creates, keys = len(do.creates), len(do.keys)
    h2 = await prov.provision(req, lambda _m: None)  # a resumed launch: nothing new is made
    assert len(do.creates) == creates and len(do.keys) == keys == 1
    assert [n.instance_id for n in h1.nodes] == [n.instance_id for n in h2.nodes]
    assert h2.nodes[0].extra["listen_host"] == h2.nodes[0].internal_ip
    assert await _healthy(cloud, h2)
    await prov.terminate(h2, lambda _m: None)


async def test_no_capacity_is_a_region_failure_and_the_droplet_limit_a_cloud_one(
    cloud: DOCloud, fakes: tuple[FakeDO, FakeDO]
) -> None:
    do, _ = fakes
    prov = cloud.provisioner()
    do.no_capacity("nyc1")
    with pytest.raises(ResourcesUnavailableError) as ei:
        await prov.provision(_req("full"), lambda _m: None)
    assert ei.value.scope == "region" and "out of stock" in (ei.value.provider_message or "")
    await prov.forget(_req("full").partial())
    do.clear()
    do.droplet_limit = True
    with pytest.raises(ResourcesUnavailableError) as ei:
        await prov.provision(_req("lim"), lambda _m: None)
    assert ei.value.scope == "cloud" and "droplet limit" in ei.value.message
    await prov.forget(_req("lim").partial())


async def test_second_node_refused_forget_removes_the_first_by_tag(
    cloud: DOCloud, fakes: tuple[FakeDO, FakeDO]
) -> None:
    do, _ = fakes
    prov = cloud.provisioner()
    req = _req("half", "gpu-mi300x1-192gb", n=2, count=1)
    real = do._create
    calls = 0

    async def second_fails(request: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            do.no_capacity("nyc1")
        return await real(request)

    do._create = second_fails  # type: ignore[method-assign]
    try:
        with pytest.raises(ResourcesUnavailableError):
            await prov.provision(req, lambda _m: None)
    finally:
        del do._create
    assert len(do.live("half-abc123")) == 1  # the first droplet exists, found by its tag
    await prov.forget(req.partial())
    assert do.live() == []


async def test_rate_limit_is_waited_out_and_a_slow_boot_is_polled(
    cloud: DOCloud, fakes: tuple[FakeDO, FakeDO]
) -> None:
    do, _ = fakes
    prov = cloud.provisioner()
    do.rate_limit(3, retry_after=0.2)
    do.boot_s = 1.0
    handle = await prov.provision(_req("rl", "gpu-mi300x1-192gb", count=1), lambda _m: None)
    assert do.rate_limited == 3 and await _healthy(cloud, handle)
    await prov.terminate(handle, lambda _m: None)


async def test_wrong_token_is_a_credentials_error_naming_its_source(
    cloud: DOCloud, fakes: tuple[FakeDO, FakeDO], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIGITALOCEAN_TOKEN", "dop_v1_wrong")
    ok, why = await cloud.check()
    assert not ok and "$DIGITALOCEAN_TOKEN" in why and "refused" in why
    with pytest.raises(CredentialsError):
        await cloud.provisioner().provision(_req("bad"), lambda _m: None)
    await cloud.provisioner().forget(_req("bad").partial())  # refused before create: nothing to do


async def test_check_names_the_variable_or_doctl_file(env: None, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    c = DOCloud()
    try:
        ok, why = await c.check()
        assert ok and "$DIGITALOCEAN_TOKEN" in why
    finally:
        await c.close()
    token = config.find_token(config.DO)
    assert token is not None
    monkeypatch.delenv("DIGITALOCEAN_TOKEN")
    cfg = tmp_path / "xdg" / "doctl" / "config.yaml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(f"access-token: nope\ncontext: work\nauth-contexts:\n  work: {token.value}\n")
    c = DOCloud()
    try:
        ok, why = await c.check()
        assert ok and str(cfg) in why and "context work" in why, why
    finally:
        await c.close()
    cfg.unlink()
    c = DOCloud()
    try:
        ok, why = await c.check()
        assert not ok and "DIGITALOCEAN_TOKEN" in why and "doctl auth init" in why
    finally:
        await c.close()
    monkeypatch.delenv("AMD_DEVELOPER_CLOUD_TOKEN")
    a = AMDDevCloud()
    try:
        ok, why = await a.check()
        assert not ok and "AMD_DEVELOPER_CLOUD_TOKEN" in why
    finally:
        await a.close()


async def test_amd_developer_cloud_is_the_same_driver_at_its_own_url(
    env: None, fakes: tuple[FakeDO, FakeDO]
) -> None:
    do, amd = fakes
    c = AMDDevCloud()
    try:
        ok, why = await c.check()
        assert ok and "$AMD_DEVELOPER_CLOUD_TOKEN" in why
        req = _req("amd1", "gpu-mi300x1-192gb-devcloud", "atl1", cloud="amddevcloud", count=1)
        handle = await c.provisioner().provision(req, lambda _m: None)
        assert handle.cloud == "amddevcloud" and amd.creates[-1]["image"] == "gpu-amd-base"
        assert do.live() == [] and len(amd.live()) == 1
        assert await _healthy(c, handle)  # type: ignore[arg-type]
        await c.provisioner().terminate(handle, lambda _m: None)
    finally:
        await c.close()


async def test_catalog_refresh_writes_gpu_sizes_per_region(env: None, fakes: tuple[FakeDO, FakeDO]) -> None:
    from skyd.clouds.catalog import load_catalog
    from skyd.clouds.catalog_refresh import catalog_fetchers, refresh_catalog

    assert {"do", "amddevcloud"} <= set(catalog_fetchers())
    path = await refresh_catalog("do")
    rows = [o for o in load_catalog(reload=True).by_cloud("do")]
    assert path.exists() and {(o.instance_type, o.region) for o in rows} >= {
        ("gpu-mi300x8-1536gb", "nyc1"), ("gpu-mi300x8-1536gb", "atl1")}
    big = next(o for o in rows if o.instance_type == "gpu-mi300x8-1536gb")
    assert (big.accelerator, big.accelerator_count, big.price, big.vcpus) == ("MI300X", 8.0, 15.92, 160.0)
    amd = size_offerings("amddevcloud", [{"slug": "gpu-mi300x1-192gb-devcloud", "regions": ["atl1"],
                                          "price_hourly": 1.99, "vcpus": 20, "memory": 245760}])
    assert amd[0].accelerator == "MI300X" and amd[0].accelerator_count == 1.0
