"""The vultr driver against the fake API v2 (tests/fakes/vultr.py), in this process: bare
metal and GPU VM bodies (plan, region, label, uploaded SSH key, OS), halt/start, each
refusal's failover scope, Retry-After, the credential checks and the catalog fetcher.
Servers are fake SSH hosts on 127.0.0.x with real node agents; nothing outside 127.0.0.0/8
is reached."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyd.clouds.base import NODE_RUNNING, NODE_STOPPED, NODE_TERMINATED
from skyd.clouds.offering import Offering
from skyd.clouds.vultr.cloud import VultrCloud
from skyd.errors import CredentialsError, ResourcesUnavailableError
from tests.fakes.vultr import FakeVultr
from tests.support.neocloud import (
    driver_fixtures,
    healthy,
    in_process,
    offer,
    request,
    vultr_env,
)

pytestmark = pytest.mark.anyio
MI8 = "vbm-256c-2048gb-8-mi300x-gpu"


fake, home, cloud = driver_fixtures(FakeVultr, VultrCloud, vultr_env, first_ip=90)


async def test_mi300x_bare_metal_then_halt_start_delete(cloud: VultrCloud, fake: FakeVultr) -> None:
    p = cloud.provisioner()
    h = await p.provision(request("vu1", offer("vultr", MI8)), lambda _: None)
    (body,) = fake.creates
    assert body["_kind"] == "bare-metals" and body["plan"] == MI8 and body["region"] == "ord"
    assert body["os_id"] == 1743 and body["label"].startswith("skyd-vu1-")
    assert body["tags"] == ["skyd-cluster=vu1-abc123"] and len(fake.ssh_keys) == 1
    assert h.accelerators == {"MI300X": 8.0} and h.hourly_cost == pytest.approx(17.52)
    assert await healthy(cloud, h) and await p.query(h) == [NODE_RUNNING]
    await p.stop(h, lambda _: None)
    assert await p.query(h) == [NODE_STOPPED]
    h = await p.start(h, lambda _: None)
    assert await p.query(h) == [NODE_RUNNING] and await healthy(cloud, h)
    await p.terminate(h, lambda _: None)
    assert await p.query(h) == [NODE_TERMINATED]
    # the key is uploaded once
    h = await p.provision(request("vu2", offer("vultr", MI8)), lambda _: None)
    assert len(fake.ssh_keys) == 1
    await p.terminate(h, lambda _: None)


async def test_gpu_vm_goes_to_instances(cloud: VultrCloud, fake: FakeVultr) -> None:
    fake.gpu = "h100x8"
    off = Offering("vultr", "vcg-h100-16c-240g-80vram", "H100", 1.0, 16, 240, "ewr", None, 2.99, None)
    p = cloud.provisioner()
    h = await p.provision(request("vuvm", off, image_id="2284"), lambda _: None)
    assert fake.creates[-1]["_kind"] == "instances" and fake.creates[-1]["os_id"] == 2284
    await p.terminate(h, lambda _: None)


async def test_no_capacity_is_a_region_failure_and_nothing_is_left(cloud: VultrCloud, fake: FakeVultr) -> None:
    fake.no_capacity.add("ord")
    req = request("vufull", offer("vultr", MI8))
    with pytest.raises(ResourcesUnavailableError) as ei:
        await cloud.provisioner().provision(req, lambda _: None)
    assert ei.value.scope == "region" and "not available" in str(ei.value.provider_message)
    await cloud.provisioner().forget(req.partial())


async def test_retry_after_is_honoured(cloud: VultrCloud, fake: FakeVultr) -> None:
    p = cloud.provisioner()
    fake.rate_limit(3, "0.1")
    h = await p.provision(request("vurl", offer("vultr", MI8)), lambda _: None)
    assert (await p.api()).http.waited_s >= 0.3
    await p.terminate(h, lambda _: None)


async def test_wrong_or_missing_key(fake: FakeVultr, home: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    async with in_process(VultrCloud, fake, vultr_env(fake, key="bad"), home, tmp_path, monkeypatch) as c:
        ok, why = await c.check()
        assert not ok and "refused" in why and "VULTR_API_KEY" in why, why
        with pytest.raises(CredentialsError):
            await c.provisioner().provision(request("vubad", offer("vultr", MI8)), lambda _: None)
    monkeypatch.delenv("VULTR_API_KEY")
    ok, why = await VultrCloud().check()
    assert not ok and "VULTR_API_KEY" in why, why


async def test_catalog_refresh_reads_metal_and_gpu_plans(cloud: VultrCloud, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from skyd.clouds.catalog import clear_catalog_cache
    from skyd.clouds.catalog_refresh import refresh_catalog

    monkeypatch.setenv("SKYD_HOME", str(tmp_path / "home"))
    text = (await refresh_catalog("vultr")).read_text()
    assert "vbm-256c-2048gb-8-mi300x-gpu,MI300X,8" in text and "17.52,14.72" in text
    assert "vcg-a100-12c-120g-80vram,A100,1" in text and "vbm-4c-32gb" not in text
    clear_catalog_cache()


async def test_amd_launch_log_names_the_image_and_how_to_set_a_rocm_one(
        cloud: VultrCloud, fake: FakeVultr) -> None:
    """Vultr publishes no ROCm image for its AMD plans: the default OS gets ROCm installed at
    first boot, and the launch log says so and how to pick a ROCm image instead; a chosen
    image is named without the advice."""
    p = cloud.provisioner()
    lines: list[str] = []
    h = await p.provision(request("vur", offer("vultr", MI8)), lines.append)
    await p.terminate(h, lambda _: None)
    (note,) = [ln for ln in lines if "Image:" in ln]
    assert "os_id 1743" in note and "ROCm" in note and "first boot" in note
    assert "image_id" in note and "vultr.os_id" in note
    lines.clear()
    fake.rocm_images.add("rocm-snap-1")  # the user's snapshot has ROCm
    h = await p.provision(request("vur2", offer("vultr", MI8), image_id="rocm-snap-1"), lines.append)
    await p.terminate(h, lambda _: None)
    (note,) = [ln for ln in lines if "Image:" in ln]
    assert "rocm-snap-1" in note and "ROCm" not in note.replace("rocm-snap-1", "")
    assert fake.creates[-1]["image_id"] == "rocm-snap-1"


async def test_default_amd_image_gets_rocm_and_the_agent_sees_the_gpus(cloud: VultrCloud, fake: FakeVultr) -> None:
    """The default OS alone has no ROCm (the fake shows no GPU to amd-smi there): skyd sends
    the user data that installs it, waits for its first-boot setup, and only then deploys the
    agent, whose detection finds the 8 MI300X."""
    import base64

    from skyd.clouds import gpucheck
    from skyd.clouds.vultr import rocm

    p = cloud.provisioner()
    lines: list[str] = []
    h = await p.provision(request("vurocm", offer("vultr", MI8)), lines.append)
    body = fake.creates[-1]
    assert body["os_id"] == 1743
    script = base64.b64decode(body["user_data"]).decode()
    assert rocm.AMDGPU_INSTALL_URL in script and "amdgpu-dkms rocm" in script and "reboot" in script
    assert any("waiting for first-boot setup" in x for x in lines), lines
    assert h.extra.get(gpucheck.CONFIRMED) is True  # 8 MI300X seen by the agent
    await p.terminate(h, lambda _: None)


async def test_a_user_image_without_rocm_fails_with_the_image_named(cloud: VultrCloud, fake: FakeVultr) -> None:
    req = request("vunorocm", offer("vultr", MI8), image_id="plain-ubuntu-snap")
    with pytest.raises(ResourcesUnavailableError) as ei:
        await cloud.provisioner().provision(req, lambda _: None)
    e = ei.value
    assert e.scope == "stop" and e.field == "resources.image_id" and "plain-ubuntu-snap" in e.message
    assert "vultr/" in e.message and "ROCm" in e.message and "amd-smi" in e.message, e.message
    assert "user_data" not in fake.creates[-1]
    await cloud.provisioner().forget(req.partial())
    assert fake.live() == []


async def test_every_bundled_catalog_row_comes_up_with_its_gpus_confirmed(cloud: VultrCloud,
                                                                         fake: FakeVultr) -> None:
    """The catalog walk: each bundled Vultr row (MI300X bare metal) is a create the fake
    accepts and, on the default OS with the ROCm first-boot install, a server whose agent
    confirms the ordered GPUs; a CPU plan comes up too (NVIDIA: test_gpu_vm_goes_to_instances)."""
    from skyd.clouds import gpucheck
    from skyd.clouds.catalog import load_catalog

    rows = load_catalog().by_cloud("vultr")
    assert rows
    p = cloud.provisioner()
    for i, o in enumerate(rows):
        h = await p.provision(request(f"vuwalk{i}", o), lambda _: None)
        assert fake.creates[-1]["plan"] == o.instance_type and "user_data" in fake.creates[-1]
        assert h.extra.get(gpucheck.CONFIRMED) is True, o
        await p.terminate(h, lambda _: None)
    # a CPU plan (not in the bundled catalog, which lists GPU plans): an instance on the
    # default OS, no ROCm user data, reachable, nothing to confirm
    cpu = Offering("vultr", "vc2-2c-4gb", None, 0.0, 2, 4, "ewr", None, 0.03, None)
    h = await p.provision(request("vucpu", cpu), lambda _: None)
    body = fake.creates[-1]
    assert body["_kind"] == "instances" and body["os_id"] == 1743 and "user_data" not in body
    assert h.accelerators == {} and await healthy(cloud, h)
    await p.terminate(h, lambda _: None)
    assert fake.live() == []
