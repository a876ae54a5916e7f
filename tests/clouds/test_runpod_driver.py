"""The runpod driver against the fake GraphQL API (tests/fakes/runpod.py), in this process:
the deploy input it sends (GPU id, data center, SSH key, ROCm image, spot bid), pods found
again by name, stop/resume, each refusal's failover scope, Retry-After, the GPU check on the
node, the credential checks and the catalog fetcher. Pods are fake SSH hosts on 127.0.0.x
with real node agents; nothing outside 127.0.0.0/8 is reached."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest

from skyd.clouds.base import (
    NODE_PREEMPTED,
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    PartialHandle,
)
from skyd.clouds.runpod.cloud import RunPodCloud
from skyd.errors import ClusterStateError, CredentialsError, ResourcesUnavailableError
from tests.fakes.runpod import FakeRunPod
from tests.support.neocloud import (
    driver_fixtures,
    healthy,
    in_process,
    offer,
    request,
    runpod_env,
)

pytestmark = pytest.mark.anyio
MI8 = "8x_MI300X_SECURE"


fake, home, cloud = driver_fixtures(FakeRunPod, RunPodCloud, runpod_env, first_ip=70)


async def test_mi300x_pod_with_rocm_image_then_stop_resume_terminate(
    cloud: RunPodCloud, fake: FakeRunPod
) -> None:
    p = cloud.provisioner()
    logs: list[str] = []
    h = await p.provision(request("rp1", offer("runpod", MI8)), logs.append)
    (body,) = fake.creates
    assert body["gpuTypeId"] == "AMD Instinct MI300X OAM" and body["gpuCount"] == 8
    assert body["cloudType"] == "SECURE" and body["dataCenterId"] == h.zone and not body["spot"]
    assert "rocm" in body["imageName"] and body["startSsh"] is True
    assert {e["key"] for e in body["env"]} >= {"PUBLIC_KEY"}
    assert h.accelerators == {"MI300X": 8.0} and h.hourly_cost == pytest.approx(19.92)
    assert h.nodes[0].ssh and h.nodes[0].ssh["host"].startswith("127.0.0.")
    assert h.nodes[0].ssh["port"] != 22  # the public port RunPod mapped to 22
    assert any("GPUs confirmed" in x for x in logs), logs
    assert await healthy(cloud, h)
    assert await p.query(h) == [NODE_RUNNING]
    # found again by name: a second provision of the same tag creates nothing
    h2 = await p.provision(request("rp1", offer("runpod", MI8)), logs.append)
    assert len(fake.creates) == 1 and h2.nodes[0].instance_id == h.nodes[0].instance_id
    await p.stop(h, logs.append)
    assert await p.query(h) == [NODE_STOPPED]
    h = await p.start(h, logs.append)
    assert await p.query(h) == [NODE_RUNNING] and await healthy(cloud, h)
    await p.terminate(h, logs.append)
    assert fake.live() == [] and await p.query(h) == [NODE_TERMINATED]


async def test_spot_pod_bids_per_gpu_and_an_interruption_shows(cloud: RunPodCloud, fake: FakeRunPod) -> None:
    p = cloud.provisioner()
    off = dataclasses.replace(offer("runpod", "2x_MI300X_SECURE"), spot_price=3.0)
    h = await p.provision(request("rps", off, spot=True), lambda _: None)
    body = fake.creates[-1]
    assert body["spot"] and body["bidPerGpu"] == pytest.approx(1.5) and body["gpuCount"] == 2
    with pytest.raises(ClusterStateError):
        await p.stop(h, lambda _: None)  # interruptible pods are not stopped and resumed
    assert await p.query(h) == [NODE_RUNNING]
    fake.interrupt(h.nodes[0].instance_id)
    assert await p.query(h) == [NODE_PREEMPTED]
    assert fake.live() == []  # the interrupted pod (and its billed disk) is removed
    await p.terminate(h, lambda _: None)


async def test_no_capacity_is_a_zone_failure_and_forget_leaves_nothing(
    cloud: RunPodCloud, fake: FakeRunPod
) -> None:
    p = cloud.provisioner()
    req = request("rpfull", offer("runpod", MI8))
    fake.no_capacity.add(str(req.offering.zone))
    fake.boot_s = 0.2
    with pytest.raises(ResourcesUnavailableError) as ei:
        await p.provision(req, lambda _: None)
    assert ei.value.scope == "zone" and "no longer any instances" in str(ei.value.provider_message)
    await p.forget(req.partial())
    assert fake.live() == []


async def test_multi_node_is_refused_before_anything_is_made(cloud: RunPodCloud, fake: FakeRunPod) -> None:
    sent = len(fake.creates)
    with pytest.raises(ResourcesUnavailableError) as ei:
        await cloud.provisioner().provision(request("rp2n", offer("runpod", MI8), n=2), lambda _: None)
    assert ei.value.scope == "cloud" and "share no network" in str(ei.value)
    assert len(fake.creates) == sent


async def test_retry_after_is_honoured_then_exhausted_rate_limits_move_to_the_next_cloud(
    cloud: RunPodCloud, fake: FakeRunPod
) -> None:
    p = cloud.provisioner()
    fake.rate_limit(2, "0.2")
    h = await p.provision(request("rprl", offer("runpod", MI8)), lambda _: None)
    api = await p.api()
    assert api.http.waited_s >= 0.4 and fake.rate_limited >= 2
    await p.terminate(h, lambda _: None)
    fake.rate_limit(50, "0")
    req = request("rprl2", offer("runpod", MI8))
    with pytest.raises(ResourcesUnavailableError) as ei:
        await p.provision(req, lambda _: None)
    assert ei.value.scope == "cloud" and "429" in str(ei.value.provider_message)
    fake.rate_limit(0)
    await p.forget(req.partial())


async def test_other_gpus_on_the_node_fail_the_attempt_with_both_named(
    cloud: RunPodCloud, fake: FakeRunPod
) -> None:
    p = cloud.provisioner()
    fake.gpu = "mi355x"
    req = request("rpgpu", offer("runpod", MI8))
    with pytest.raises(ResourcesUnavailableError) as ei:
        await p.provision(req, lambda _: None)
    msg = str(ei.value)
    assert "MI300X:8" in msg and "MI355X" in msg and ei.value.scope == "zone", msg
    await p.forget(req.partial())
    assert fake.live() == []


async def test_a_slow_create_cancelled_by_the_deadline_is_forgotten(
    cloud: RunPodCloud, fake: FakeRunPod
) -> None:
    p = cloud.provisioner()
    fake.boot_s = 30
    req = request("rpslow", offer("runpod", MI8))
    with anyio.move_on_after(1.0) as scope:
        await p.provision(req, lambda _: None)
    assert scope.cancelled_caught and len(fake.live()) == 1
    await p.forget(req.partial())
    assert fake.live() == []


async def test_keys_wrong_or_missing(fake: FakeRunPod, home: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    env = runpod_env(fake, key="wrong-key")
    async with in_process(RunPodCloud, fake, env, home, tmp_path, monkeypatch) as c:
        ok, why = await c.check()
        assert not ok and "refused" in why and "RUNPOD_API_KEY" in why, why
        req = request("rpbad", offer("runpod", MI8))
        with pytest.raises(CredentialsError):
            await c.provisioner().provision(req, lambda _: None)
        await c.provisioner().forget(PartialHandle("rpbad", "runpod", None, None, req.cluster_tag))
    monkeypatch.delenv("RUNPOD_API_KEY")
    c = RunPodCloud()
    ok, why = await c.check()
    assert not ok and "RUNPOD_API_KEY" in why and "no RunPod API key" in why, why
    # the RunPod CLI's config file counts
    toml = tmp_path / "rp.toml"
    toml.write_text(f'[default]\napi_key = "{next(iter(fake.keys))}"\n')
    monkeypatch.setenv("RUNPOD_CONFIG", str(toml))
    c = RunPodCloud()
    ok, why = await c.check()
    assert ok and str(toml) in why, why
    await c.close()


async def test_catalog_refresh_prices_from_gpu_types(cloud: RunPodCloud, fake: FakeRunPod,
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from skyd.clouds.catalog import clear_catalog_cache, load_catalog
    from skyd.clouds.catalog_refresh import catalog_fetchers, refresh_catalog

    monkeypatch.setenv("SKYD_HOME", str(tmp_path / "home"))  # the refreshed catalog stays here
    assert "runpod" in catalog_fetchers()
    path = await refresh_catalog("runpod")
    text = path.read_text()
    assert "8x_MI300X_SECURE,MI300X,8" in text and "19.92" in text
    cat = load_catalog().by_cloud("runpod")
    # "NVIDIA H100 PCIe" prices H100, "NVIDIA H100 80GB HBM3" prices H100-SXM: never folded
    pcie = [o for o in cat if o.instance_type == "1x_H100_COMMUNITY"]
    sxm = [o for o in cat if o.instance_type == "1x_H100-SXM_COMMUNITY"]
    assert pcie and {o.accelerator for o in pcie} == {"H100"} and pcie[0].spot_price == pytest.approx(1.25)
    assert sxm and {o.accelerator for o in sxm} == {"H100-SXM"} and sxm[0].spot_price == pytest.approx(1.75)
    # gpuTypes prices GPUs only: the CPU flavors stay
    assert any(o.instance_type == "cpu3c-2-4" and not o.accelerator for o in cat)
    clear_catalog_cache()
