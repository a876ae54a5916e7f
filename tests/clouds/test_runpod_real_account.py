"""RunPod as on a real account, against the strict fake (tests/fakes/runpod.py: every request
validated against RunPod's published GraphQL schema, pods that behave like their image):
pods of images without sshd become reachable through the start command, every catalog GPU
name is ordered under its own RunPod id (H100 PCIe is not H100 SXM), CPU offers go through
``deployCpuPod``, and every bundled catalog row becomes a create request RunPod accepts.
Everything runs on 127.0.0.0/8."""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from skyd.clouds.catalog import load_catalog
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.runpod.api import RunPodAPI
from skyd.clouds.runpod.cloud import RunPodCloud
from skyd.errors import ResourcesUnavailableError
from tests.fakes.runpod import FakeRunPod, start_command_runs_sshd
from tests.support.neocloud import driver_fixtures, healthy, offer, request, runpod_env

pytestmark = pytest.mark.anyio

fake, home, cloud = driver_fixtures(FakeRunPod, RunPodCloud, runpod_env, first_ip=230)


async def _up(cloud: RunPodCloud, name: str, itype: str, **kw: object) -> tuple[object, list[str]]:
    logs: list[str] = []
    with anyio.fail_after(90):
        h = await cloud.provisioner().provision(request(name, offer("runpod", itype), **kw), logs.append)
    return h, logs


async def test_a_rocm_image_has_no_sshd_until_the_start_command_starts_it(
    cloud: RunPodCloud, fake: FakeRunPod
) -> None:
    h, logs = await _up(cloud, "rpamd", "2x_MI300X_SECURE")
    body = fake.creates[-1]
    assert body["call"] == "podFindAndDeployOnDemand" and body["imageName"].startswith("rocm/")
    # the image has no sshd: only the start command makes the pod reachable
    assert start_command_runs_sshd(body["dockerArgs"], body["imageName"],
                                   {e["key"]: e["value"] for e in body["env"]})
    assert any("GPUs confirmed" in x for x in logs), logs
    assert h.accelerators == {"MI300X": 2.0} and await healthy(cloud, h)  # type: ignore[attr-defined]
    await cloud.provisioner().terminate(h, lambda _: None)  # type: ignore[arg-type]


async def test_the_fake_pod_of_an_image_without_sshd_answers_nothing_on_22(cloud: RunPodCloud,
                                                                          fake: FakeRunPod) -> None:
    """What a real account does with the old request (startSsh + PUBLIC_KEY, no command):
    the pod runs, its port 22 is mapped, nothing listens there."""
    api = RunPodAPI(next(iter(fake.keys)), "test")
    try:
        pod = await api.deploy({"name": "bare", "imageName": "rocm/pytorch:latest", "gpuTypeId":
                                "AMD Instinct MI300X OAM", "gpuCount": 1, "cloudType": "SECURE",
                                "startSsh": True, "env": [{"key": "PUBLIC_KEY", "value": "ssh-ed25519 AAAA x"}]},
                               spot=False)
        runtime = None
        with anyio.fail_after(10):
            while not runtime:
                runtime = next(p for p in await api.pods() if p["id"] == pod["id"])["runtime"]
                await anyio.sleep(0.05)
        (p22,) = runtime["ports"]
        assert p22["privatePort"] == 22 and p22["isIpPublic"]
        with pytest.raises(OSError):
            await anyio.connect_tcp(p22["ip"], p22["publicPort"])
        await api.terminate(pod["id"])
    finally:
        await api.close()


@pytest.mark.parametrize(("itype", "gpu_id", "name"), [
    ("1x_H100_SECURE", "NVIDIA H100 PCIe", "H100"),
    ("2x_H100-SXM_SECURE", "NVIDIA H100 80GB HBM3", "H100-SXM"),
    ("1x_L4_SECURE", "NVIDIA L4", "L4"),
    ("1x_RTXA4500_SECURE", "NVIDIA RTX A4500", "RTXA4500"),
])
async def test_nvidia_rows_are_ordered_under_their_own_gpu_id_and_the_node_confirms_them(
    cloud: RunPodCloud, fake: FakeRunPod, itype: str, gpu_id: str, name: str
) -> None:
    h, logs = await _up(cloud, "rpnv", itype)
    body = fake.creates[-1]
    assert body["gpuTypeId"] == gpu_id and body["dockerArgs"]
    assert list(h.accelerators) == [name]  # type: ignore[attr-defined]
    assert any("GPUs confirmed" in x for x in logs), logs
    await cloud.provisioner().terminate(h, lambda _: None)  # type: ignore[arg-type]


async def test_a_community_pod_is_placed_by_country_and_a_secure_pod_by_data_center(
    cloud: RunPodCloud, fake: FakeRunPod
) -> None:
    sec = offer("runpod", "1x_L4_SECURE")
    com = dataclasses.replace(sec, instance_type="1x_L4_COMMUNITY")
    for off, want in ((sec, {"dataCenterId": sec.zone}), (com, {"countryCode": sec.region})):
        logs: list[str] = []
        with anyio.fail_after(90):
            h = await cloud.provisioner().provision(request("rpct", off), logs.append)
        body = fake.creates[-1]
        assert {k: body.get(k) for k in want} == want and body["cloudType"] in off.instance_type
        assert not ({"dataCenterId", "countryCode"} - set(want)) & set(body), body
        await cloud.provisioner().terminate(h, lambda _: None)


async def test_a_cpu_offer_is_a_cpu_pod(cloud: RunPodCloud, fake: FakeRunPod) -> None:
    h, _ = await _up(cloud, "rpcpu", "cpu3c-2-4")
    body = fake.creates[-1]
    assert body["call"] == "deployCpuPod" and body["instanceId"] == "cpu3c-2-4"
    assert body["imageName"] == "ubuntu:22.04"  # no sshd in it: the start command adds one
    assert "gpuTypeId" not in body and "gpuCount" not in body
    assert not h.accelerators and await healthy(cloud, h)  # type: ignore[attr-defined]
    await cloud.provisioner().terminate(h, lambda _: None)  # type: ignore[arg-type]
    with pytest.raises(ResourcesUnavailableError) as ei:
        await cloud.provisioner().provision(request("rpcpus", offer("runpod", "cpu3c-2-4"), spot=True),
                                            lambda _: None)
    assert ei.value.scope == "cloud" and "on-demand only" in str(ei.value)


async def test_an_amd_pod_of_an_image_without_rocm_shows_no_gpu_and_names_the_image(
    cloud: RunPodCloud, fake: FakeRunPod
) -> None:
    req = request("rpnorocm", offer("runpod", "1x_MI300X_SECURE"), image_id="docker:ubuntu:22.04")
    try:
        with anyio.fail_after(90), pytest.raises(ResourcesUnavailableError) as ei:
            await cloud.provisioner().provision(req, lambda _: None)
    finally:
        await cloud.provisioner().forget(req.partial())
    # The user's own image lacks ROCm: another zone would not do better with it, so the
    # launch ends naming the field and the image (skyd.clouds.gpucheck), after cleanup.
    assert "no GPUs" in str(ei.value) and "docker:ubuntu:22.04" in str(ei.value), ei.value
    assert ei.value.scope == "stop" and "resources.image_id" in str(ei.value), ei.value
    assert fake.live() == []


async def test_the_fake_refuses_what_runpods_schema_refuses(cloud: RunPodCloud, fake: FakeRunPod) -> None:
    api = RunPodAPI(next(iter(fake.keys)), "test")
    inp = {"name": "x", "imageName": "runpod/base", "gpuTypeId": "NVIDIA L4", "gpuCount": 1}
    bad = [
        # the input variable declared nullable: the argument is non-null
        ("mutation($input: PodFindAndDeployOnDemandInput) { podFindAndDeployOnDemand(input: $input) { id } }",
         inp, "PodFindAndDeployOnDemandInput!"),
        # a field the input type does not have
        ("mutation($input: PodFindAndDeployOnDemandInput!) { podFindAndDeployOnDemand(input: $input) { id } }",
         inp | {"gpuType": "NVIDIA L4"}, "gpuType"),
        # a wrong type
        ("mutation($input: PodFindAndDeployOnDemandInput!) { podFindAndDeployOnDemand(input: $input) { id } }",
         inp | {"gpuCount": "eight"}, "gpuCount"),
        # a GPU field on a CPU pod
        ("mutation($input: deployCpuPodInput!) { deployCpuPod(input: $input) { id } }",
         {"name": "c", "imageName": "ubuntu", "instanceId": "cpu3c-2-4", "gpuTypeId": "NVIDIA L4"}, "gpuTypeId"),
        # a field the Pod type does not have
        ("query { myself { pods { id sshAddress } } }", None, "sshAddress"),
    ]
    try:
        for q, variables, word in bad:
            with pytest.raises(APIError) as ei:
                await api.gql(q, {"input": variables} if variables else None)
            assert ei.value.status == 400 and word in ei.value.message, (q, ei.value)
    finally:
        await api.close()
    assert fake.live() == []


async def test_every_bundled_catalog_row_is_a_create_request_runpod_accepts(
    cloud: RunPodCloud, fake: FakeRunPod
) -> None:
    rows = load_catalog().by_cloud("runpod")
    kinds = {"amd": 0, "nvidia": 0, "cpu": 0}
    p = cloud.provisioner()
    fake.dry = True  # every check of a create, no pods made
    fake.refused.clear()
    before = len(fake.creates)
    sent = 0
    for o in rows:
        for spot in ([False, True] if o.spot_price and o.accelerator else [False]):
            req = request("walk", dataclasses.replace(o), spot=spot)
            await p.create_vm(req, 0, f"walk-{sent}", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA walk")
            sent += 1
        kinds["cpu" if not o.accelerator else "amd" if o.accelerator.startswith("MI") else "nvidia"] += 1
    assert fake.refused == [] and len(fake.creates) - before == sent
    # no pod asks for a shape no host has (the bundled 8x L40S row says 1024 vCPUs)
    for c in fake.creates[before:]:
        if c.get("gpuCount"):
            assert c["minVcpuCount"] <= 4 * c["gpuCount"] and c["minMemoryInGb"] <= 192 * c["gpuCount"], c
    assert all(kinds.values()), kinds
    ids = {c.get("gpuTypeId") for c in fake.creates[before:]}
    assert {"NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL", "AMD Instinct MI300X OAM"} <= ids
