"""The hotaisle driver against a fake held to Hot Aisle's published swagger
(tests/data/hotaisle/swagger.json): the team's VM limit (401 on the create, per the swagger)
is not a refused key, insufficient balance moves to the next cloud, offers with ``Quantity:
0`` are never posted, libvirt's "shut off"/"paused" states read as stopped, and the fake
refuses any body the swagger does not allow."""

# ruff: noqa: F811  (the driver fixtures, made by name, are the test parameters)

from __future__ import annotations

import pytest

from skyd.clouds.base import NODE_RUNNING, NODE_STOPPED
from skyd.clouds.hotaisle.cloud import HotAisleCloud
from skyd.clouds.hotaisle.provisioner import matching_offer
from skyd.errors import ResourcesUnavailableError
from tests.fakes.hotaisle import OFFERS, SWAGGER, FakeHotAisle
from tests.support.neocloud import driver_fixtures, hotaisle_env, offer, request

pytestmark = pytest.mark.anyio
MI8 = "8x-MI300X"

fake, home, cloud = driver_fixtures(FakeHotAisle, HotAisleCloud, hotaisle_env, first_ip=150)


async def test_team_vm_limit_is_a_limit_not_a_bad_key(cloud: HotAisleCloud, fake: FakeHotAisle) -> None:
    fake.vm_limit = 0
    req = request("halim", offer("hotaisle", MI8))
    with pytest.raises(ResourcesUnavailableError) as ei:  # not CredentialsError: the key is good
        await cloud.provisioner().provision(req, lambda _: None)
    e = ei.value
    assert e.scope == "region" and "maximum number of VMs" in e.message and "401" in (e.provider_message or "")
    assert e.hint and "limit" in e.hint
    await cloud.provisioner().forget(req.partial())
    ok, why = await cloud.check()  # the check still passes: nothing blocks the cloud
    assert ok, why


async def test_insufficient_balance_moves_to_another_cloud(cloud: HotAisleCloud, fake: FakeHotAisle) -> None:
    fake.insufficient_balance = True
    req = request("habal", offer("hotaisle", MI8))
    with pytest.raises(ResourcesUnavailableError) as ei:
        await cloud.provisioner().provision(req, lambda _: None)
    assert ei.value.scope == "cloud" and "balance" in ei.value.message
    await cloud.provisioner().forget(req.partial())


async def test_an_offer_with_quantity_zero_is_never_posted(cloud: HotAisleCloud, fake: FakeHotAisle) -> None:
    fake.no_capacity.add("MI300X")  # still listed, Quantity 0
    creates = len(fake.creates)
    req = request("haq0", offer("hotaisle", MI8))
    with pytest.raises(ResourcesUnavailableError) as ei:
        await cloud.provisioner().provision(req, lambda _: None)
    assert ei.value.scope == "region" and fake.creates[creates:] == []
    await cloud.provisioner().forget(req.partial())
    listed = [dict(o, Quantity=0) for o in OFFERS] + [dict(OFFERS[1], Quantity=2)]
    assert matching_offer(listed, 8, "MI300X") is listed[-1]


async def test_shut_off_and_paused_vms_read_as_stopped(cloud: HotAisleCloud, fake: FakeHotAisle) -> None:
    p = cloud.provisioner()
    h = await p.provision(request("hast", offer("hotaisle", "1x-MI300X")), lambda _: None)
    assert await p.query(h) == [NODE_RUNNING]
    for state in ("shut off", "paused"):
        fake.set_state(h.nodes[0].instance_id, state)
        assert await p.query(h) == [NODE_STOPPED], state
    await p.terminate(h, lambda _: None)


def test_the_fake_checks_bodies_against_the_published_swagger() -> None:
    assert SWAGGER.version == "1.0.0" and "hotaisle" in SWAGGER.source
    assert SWAGGER.check(OFFERS[1]["Specs"], "VMProvisionRequest") == []
    for o in OFFERS:
        assert SWAGGER.check(o, "AvailableVirtualMachineTypes") == []
    bad = dict(OFFERS[1]["Specs"], gpu_count=8)
    bad["cpus"] = {"model": "x", "count": 1}  # CPUs requires cores, frequency, manufacturer
    errs = SWAGGER.check(bad, "VMProvisionRequest", "body")
    assert "body.gpu_count: unknown field (not in hotaisle swagger)" in errs, errs
    assert any("cpus.cores: required" in e for e in errs), errs
    assert SWAGGER.check({"authorized_key": 5}, "SSHKeyRequest")
    assert SWAGGER.check({"state": "running", "host": "h"}, "VirtualMachineState") == []


async def test_a_body_the_swagger_refuses_is_a_400(cloud: HotAisleCloud, fake: FakeHotAisle) -> None:
    api = await cloud.provisioner().api()
    from skyd.clouds.neocloud.http import APIError

    with pytest.raises(APIError) as ei:
        await api.call("POST", api.vms(), {"gpus": [{"count": 8}], "cpu_cores": "many"})
    assert ei.value.status == 400 and "ram_capacity: required" in str(ei.value)
    assert fake.live() == []
