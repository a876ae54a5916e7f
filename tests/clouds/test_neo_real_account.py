"""DigitalOcean, AMD Developer Cloud and Crusoe as on a real account, against fakes that
follow each provider's documented create request and error bodies (tests/fakes/doapi.py,
crusoeapi.py) and whose machines show their GPUs only on an image with the driver stack:
every bundled catalog row becomes a create request the fake accepts, and an AMD, an NVIDIA
and a CPU machine each come up with the node agent confirming the GPUs ordered (none for
CPU). The bundled catalogs of these providers list AMD rows only; the NVIDIA and CPU
machines are the providers' documented sizes and types. Nothing leaves 127.0.0.0/8."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from skyd.clouds.base import ProvisionRequest
from skyd.clouds.catalog import load_catalog
from skyd.clouds.crusoe.cloud import CrusoeCloud
from skyd.clouds.crusoe.provisioner import default_image as crusoe_image
from skyd.clouds.do.cloud import AMDDevCloud, DOCloud
from skyd.clouds.do.provisioner import default_image as do_image
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.offering import Offering
from skyd.errors import ResourcesUnavailableError
from tests.fakes.crusoeapi import FakeCrusoe
from tests.fakes.doapi import AMD_SIZES, FakeDO
from tests.fakes.vmapi import free_port
from tests.support.gcp import netguard
from tests.support.neo import crusoe_environ, do_environ

pytestmark = pytest.mark.anyio
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBbkQ7Tq3xS0a2ZrN9n1Gm9cXv3hJj0yVqk0c2H8m6v6 walk"


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeDO, FakeDO, FakeCrusoe]]:
    port = free_port()
    do = FakeDO(tmp_path_factory.mktemp("do"), first_ip=210, ssh_port=port,
                regions=("nyc1", "atl1", "ric1", "mem1")).start()
    amd = FakeDO(tmp_path_factory.mktemp("amd"), first_ip=220, ssh_port=port, token="amd-fake",
                 regions=("atl1",), sizes=AMD_SIZES).start()
    cr = FakeCrusoe(tmp_path_factory.mktemp("crusoe"), first_ip=240).start()
    try:
        yield do, amd, cr  # type: ignore[misc]
    finally:
        do.stop()
        amd.stop()
        cr.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("neohome")  # one SKYD_HOME: the agent zipapp is built once


@pytest.fixture
def env(fakes: tuple[FakeDO, FakeDO, FakeCrusoe], home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeDO, FakeDO, FakeCrusoe]]:
    do, amd, cr = fakes
    for k, v in (do_environ(do, amd, tmp_path) | crusoe_environ(cr, tmp_path)).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("DIGITALOCEAN_ACCESS_TOKEN", raising=False)
    monkeypatch.delenv("CRUSOE_PROFILE", raising=False)
    monkeypatch.setenv("SKYD_HOME", str(home))
    monkeypatch.setenv("SKYD_CONFIG_DIR", str(tmp_path / "config"))
    for f in fakes:
        f.clear()
    cr.capacity.update({("h100-80gb-sxm-ib.8x", "us-east1-a"): 2, ("l40s-48gb.1x", "us-east1-a"): 2,
                        ("c1a.16x", "us-east1-a"): 4})
    before = len(netguard.VIOLATIONS)
    yield do, amd, cr
    for f in fakes:
        f.clear()
    assert netguard.VIOLATIONS[before:] == []
    assert do.live() == [] and amd.live() == [] and cr.live() == []


@pytest.fixture
async def clouds(env: Any) -> AsyncIterator[dict[str, Any]]:
    cs = {"do": DOCloud(), "amddevcloud": AMDDevCloud(), "crusoe": CrusoeCloud()}
    try:
        yield cs
    finally:
        for c in cs.values():
            await c.close()


def _req(name: str, off: Offering, **kw: Any) -> ProvisionRequest:
    return ProvisionRequest(cluster_name=name, num_nodes=1, offering=off, use_spot=False,
                            token="tok-" + name, tag=f"{name}-abc123", **kw)


async def _up(cloud: Any, name: str, off: Offering, **kw: Any) -> tuple[Any, list[str]]:
    logs: list[str] = []
    with anyio.fail_after(90):
        h = await cloud.provisioner().provision(_req(name, off, **kw), logs.append)
    return h, logs


@pytest.mark.parametrize("provider", ["do", "amddevcloud", "crusoe"])
async def test_every_bundled_catalog_row_is_a_create_request_the_provider_accepts(
    provider: str, env: tuple[FakeDO, FakeDO, FakeCrusoe], clouds: dict[str, Any]
) -> None:
    do, amd, cr = env
    fake: Any = {"do": do, "amddevcloud": amd, "crusoe": cr}[provider]
    fake.dry = True  # every check of a create, no machines made
    fake.refused.clear()
    p = clouds[provider].provisioner()
    rows = load_catalog().by_cloud(provider)
    assert rows
    before = len(fake.creates)
    for i, o in enumerate(rows):
        req = _req(f"walk{i}", o)
        if provider == "crusoe":  # the location is chosen before the create (capacities)
            await p.prepare(req, {}, ["walk"], "crusoe")
        await p.create_vm(req, 0, f"walk{i}-0", KEY)
    assert fake.refused == [] and len(fake.creates) - before == len(rows)
    for body, o in zip(fake.creates[before:], rows, strict=True):
        size = body.get("size") or body.get("type")
        assert size == o.instance_type
        image = body["image"]  # the default image carries the driver stack of the row's GPUs
        assert ("rocm" in image or image == "gpu-amd-base"), (o, image)


async def test_do_amd_nvidia_and_cpu_droplets_come_up_and_the_agent_confirms_the_gpus(
    env: tuple[FakeDO, FakeDO, FakeCrusoe], clouds: dict[str, Any]
) -> None:
    do, _, _ = env
    cloud = clouds["do"]
    cases = [
        (next(o for o in load_catalog().by_cloud("do") if o.instance_type == "gpu-mi300x1-192gb"),
         "gpu-amd-base", {"MI300X": 1.0}),
        (Offering("do", "gpu-h100x1-80gb", "H100", 1.0, 20, 240, "nyc1", None, 3.39, None),
         "gpu-h100x1-base", {"H100": 1.0}),
        (Offering("do", "gpu-h100x8-640gb", "H100", 8.0, 160, 1920, "nyc1", None, 23.92, None),
         "gpu-h100x8-base", {"H100": 8.0}),
        (Offering("do", "s-2vcpu-4gb", None, 0.0, 2, 4, "nyc1", None, 0.03571, None),
         "ubuntu-24-04-x64", {}),
    ]
    for i, (off, image, accs) in enumerate(cases):
        h, logs = await _up(cloud, f"dok{i}", off)
        assert do.creates[-1]["image"] == image and h.accelerators == accs
        if accs:
            assert any("GPUs confirmed" in x for x in logs), logs
        await cloud.provisioner().terminate(h, lambda _: None)


async def test_amd_developer_cloud_mi300x_comes_up_with_its_gpus(
    env: tuple[FakeDO, FakeDO, FakeCrusoe], clouds: dict[str, Any]
) -> None:
    _, amd, _ = env
    off = next(o for o in load_catalog().by_cloud("amddevcloud") if o.accelerator_count == 8)
    h, logs = await _up(clouds["amddevcloud"], "amdok", off)
    assert amd.creates[-1]["image"] == "gpu-amd-base" and h.accelerators == {"MI300X": 8.0}
    assert any("GPUs confirmed" in x for x in logs), logs
    await clouds["amddevcloud"].provisioner().terminate(h, lambda _: None)


async def test_crusoe_amd_nvidia_and_cpu_vms_come_up_and_the_agent_confirms_the_gpus(
    env: tuple[FakeDO, FakeDO, FakeCrusoe], clouds: dict[str, Any]
) -> None:
    _, _, cr = env
    cloud = clouds["crusoe"]
    cases = [
        (next(o for o in load_catalog().by_cloud("crusoe") if o.instance_type == "mi300x-192gb.8x"),
         "ubuntu-rocm:latest", {"MI300X": 8.0}),
        (Offering("crusoe", "h100-80gb-sxm-ib.8x", "H100-SXM", 8.0, 176, 1440, "us-east1-a", None, 31.2, None),
         "ubuntu22.04-nvidia-sxm-docker:latest", {"H100-SXM": 8.0}),
        (Offering("crusoe", "l40s-48gb.1x", "L40S", 1.0, 8, 147, "us-east1-a", None, 1.0, None),
         "ubuntu22.04-nvidia-pcie-docker:latest", {"L40S": 1.0}),
        (Offering("crusoe", "c1a.16x", None, 0.0, 16, 64, "us-east1-a", None, 0.64, None),
         "ubuntu22.04:latest", {}),
    ]
    for i, (off, image, accs) in enumerate(cases):
        h, logs = await _up(cloud, f"crok{i}", off)
        assert cr.creates[-1]["image"] == image and h.accelerators == accs
        if accs:
            assert any("GPUs confirmed" in x for x in logs), logs
        await cloud.provisioner().terminate(h, lambda _: None)


@pytest.mark.parametrize("provider", ["do", "crusoe"])
async def test_an_image_without_the_driver_stack_shows_no_gpu_and_the_launch_names_it(
    provider: str, env: tuple[FakeDO, FakeDO, FakeCrusoe], clouds: dict[str, Any]
) -> None:
    off = next(o for o in load_catalog().by_cloud(provider) if o.accelerator == "MI300X")
    if provider == "crusoe":
        off = Offering("crusoe", off.instance_type, "MI300X", 8.0, 176, 1920, "us-east1-a", None, 27.6, None)
    plain = "ubuntu-24-04-x64" if provider == "do" else "ubuntu22.04:latest"
    req = _req("nodrv", off, image_id=plain)
    try:
        with anyio.fail_after(90), pytest.raises(ResourcesUnavailableError) as ei:
            await clouds[provider].provisioner().provision(req, lambda _: None)
    finally:
        await clouds[provider].provisioner().forget(req.partial())
    # The user's own image lacks the driver stack: no other zone would do better with it, so
    # the launch ends naming the image and the field (skyd.clouds.gpucheck), after cleanup.
    assert "no GPUs" in str(ei.value) and plain in str(ei.value), ei.value
    assert ei.value.scope == "stop" and "resources.image_id" in str(ei.value), ei.value


async def test_the_fakes_refuse_bodies_the_documented_api_refuses(
    env: tuple[FakeDO, FakeDO, FakeCrusoe], clouds: dict[str, Any]
) -> None:
    do_api = await clouds["do"].provisioner().api()
    good = {"name": "x-0", "region": "nyc1", "size": "gpu-mi300x1-192gb", "image": "gpu-amd-base"}
    for body, word in [(good | {"gpu": 1}, "gpu"), (good | {"name": "x_0"}, "hostname"),
                       (good | {"tags": ["skyd cluster"]}, "tag"), ({k: v for k, v in good.items() if k != "image"},
                                                                    "image")]:
        with pytest.raises(APIError) as ei:
            await do_api.call("POST", "/droplets", body=body)
        assert ei.value.status == 422 and word in ei.value.message, (body, ei.value)
    cr_api = await clouds["crusoe"].provisioner().api()
    cgood = {"name": "x-0", "type": "mi300x-192gb.8x", "location": "us-east1-a", "image": "ubuntu-rocm:latest",
             "ssh_public_key": KEY}
    for body, word in [(cgood | {"gpus": 8}, "gpus"), ({k: v for k, v in cgood.items() if k != "ssh_public_key"},
                                                        "ssh_public_key"), (cgood | {"type": "mi300x.8x"}, "type")]:
        with pytest.raises(APIError) as ei:
            await cr_api.vm("POST", "/instances", body=body)
        assert ei.value.status == 400 and word in ei.value.message, (body, ei.value)


def test_default_images_carry_the_driver_stack_of_the_machine() -> None:
    assert do_image("MI300X", 8) == "gpu-amd-base"
    assert do_image("H100", 1) == "gpu-h100x1-base" and do_image("H100", 8) == "gpu-h100x8-base"
    assert do_image(None, 0) == "ubuntu-24-04-x64"
    assert crusoe_image("mi355x-288gb.8x", "MI355X") == "ubuntu-rocm:latest"
    assert crusoe_image("h100-80gb-sxm-ib.8x", "H100-SXM") == "ubuntu22.04-nvidia-sxm-docker:latest"
    assert crusoe_image("l40s-48gb.1x", "L40S") == "ubuntu22.04-nvidia-pcie-docker:latest"
    assert crusoe_image("c1a.16x", None) == "ubuntu22.04:latest"
