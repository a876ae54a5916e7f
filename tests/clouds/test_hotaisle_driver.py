"""The hotaisle driver against the fake API (tests/fakes/hotaisle.py), in this process: the
offer's specs posted back, the VM recorded for its tag, user ``hotaisle``, forced delete,
no capacity, Retry-After, key and team checks, and the catalog fetcher (cents per hour).
VMs are fake SSH hosts on 127.0.0.x with real node agents; nothing outside 127.0.0.0/8."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyd.clouds.base import NODE_RUNNING, NODE_TERMINATED
from skyd.clouds.hotaisle import records
from skyd.clouds.hotaisle.cloud import HotAisleCloud
from skyd.errors import ClusterStateError, CredentialsError, ResourcesUnavailableError
from tests.fakes.hotaisle import OFFERS, FakeHotAisle
from tests.support.neocloud import (
    driver_fixtures,
    healthy,
    hotaisle_env,
    in_process,
    offer,
    request,
)

pytestmark = pytest.mark.anyio
MI8 = "8x-MI300X"


fake, home, cloud = driver_fixtures(FakeHotAisle, HotAisleCloud, hotaisle_env, first_ip=110)


async def test_mi300x_vm_from_the_offer_specs_then_delete(cloud: HotAisleCloud, fake: FakeHotAisle) -> None:
    p = cloud.provisioner()
    h = await p.provision(request("ha1", offer("hotaisle", MI8)), lambda _: None)
    assert fake.creates == [OFFERS[1]["Specs"]] and len(fake.ssh_keys) == 1
    assert h.nodes[0].ssh and h.nodes[0].ssh["user"] == "hotaisle"
    assert h.hourly_cost == pytest.approx(15.92)
    assert await records.names("ha1-abc123") == {0: h.nodes[0].instance_id}
    assert await healthy(cloud, h) and await p.query(h) == [NODE_RUNNING]
    with pytest.raises(ClusterStateError):
        await p.stop(h, lambda _: None)
    assert await p.query(h) == [NODE_RUNNING]  # a refused stop touched nothing
    await p.terminate(h, lambda _: None)
    assert await p.query(h) == [NODE_TERMINATED] and await records.names("ha1-abc123") == {}


async def test_no_capacity_and_nothing_is_left(cloud: HotAisleCloud, fake: FakeHotAisle) -> None:
    fake.no_capacity.add("MI300X")
    req = request("hafull", offer("hotaisle", MI8))
    with pytest.raises(ResourcesUnavailableError) as ei:
        await cloud.provisioner().provision(req, lambda _: None)
    assert ei.value.scope == "region" and "no 8x MI300X" in str(ei.value)
    await cloud.provisioner().forget(req.partial())


async def test_retry_after_is_honoured(cloud: HotAisleCloud, fake: FakeHotAisle) -> None:
    p = cloud.provisioner()
    fake.rate_limit(2, "0.15")
    h = await p.provision(request("harl", offer("hotaisle", "1x-MI300X")), lambda _: None)
    assert (await p.api()).http.waited_s >= 0.3
    await p.terminate(h, lambda _: None)


async def test_wrong_key_wrong_team_missing_team(fake: FakeHotAisle, home: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    async with in_process(HotAisleCloud, fake, hotaisle_env(fake, key="bad"), home, tmp_path, monkeypatch) as c:
        ok, why = await c.check()
        assert not ok and "refused" in why and "HOTAISLE_API_KEY" in why, why
        with pytest.raises(CredentialsError):
            await c.provisioner().provision(request("habad", offer("hotaisle", MI8)), lambda _: None)
    monkeypatch.setenv("HOTAISLE_API_KEY", next(iter(fake.keys)))
    monkeypatch.setenv("HOTAISLE_TEAM", "someone-else")
    ok, why = await HotAisleCloud().check()
    assert not ok and "someone-else" in why, why
    monkeypatch.delenv("HOTAISLE_TEAM")
    ok, why = await HotAisleCloud().check()
    assert not ok and "no Hot Aisle team" in why and "HOTAISLE_TEAM" in why, why


async def test_catalog_refresh_reads_cents_per_hour(cloud: HotAisleCloud, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from skyd.clouds.catalog import clear_catalog_cache
    from skyd.clouds.catalog_refresh import refresh_catalog

    monkeypatch.setenv("SKYD_HOME", str(tmp_path / "home"))
    text = (await refresh_catalog("hotaisle")).read_text()
    assert "8x-MI300X,MI300X,8" in text and "15.92" in text and "1x-MI300X,MI300X,1" in text
    clear_catalog_cache()


async def test_every_bundled_catalog_row_comes_up_with_its_gpus_confirmed(cloud: HotAisleCloud,
                                                                         fake: FakeHotAisle) -> None:
    """The catalog walk: each bundled Hot Aisle row is a create the fake accepts (its swagger)
    and a VM whose agent confirms the ordered MI300X count (Hot Aisle's VMs ship with ROCm)."""
    from skyd.clouds import gpucheck
    from skyd.clouds.catalog import load_catalog

    rows = load_catalog().by_cloud("hotaisle")
    assert {o.instance_type for o in rows} >= {"1x-MI300X", MI8}
    p = cloud.provisioner()
    for i, o in enumerate(rows):
        h = await p.provision(request(f"hawalk{i}", o), lambda _: None)
        assert h.accelerators == {"MI300X": o.accelerator_count}
        assert h.extra.get(gpucheck.CONFIRMED) is True, o
        await p.terminate(h, lambda _: None)
    assert fake.rejected == [] and fake.live() == []
