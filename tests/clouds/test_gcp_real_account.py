# ruff: noqa: F811  (the driver module's fixtures, imported by name, are the test parameters)
"""What a real Compute Engine account refuses or needs, against the fake made strict by the
published Compute v1 discovery document (google-api-python-client's compute.v1.json): spot
VMs with MIGRATE, Persistent Disk boot disks on Hyperdisk-only series, GPU VMs without the
driver metadata, metadata SSH keys in an OS Login project; and the fake itself refusing what
the document does not allow."""

from __future__ import annotations

import json
from typing import Any

import pytest

from skyd.clouds import gpucheck
from skyd.clouds.gcp.api import GCEError
from skyd.clouds.gcp.classify import classify
from skyd.clouds.gcp.cloud import GCPCloud
from skyd.clouds.gcp.instances import instance_body
from skyd.errors import ResourcesUnavailableError
from tests.clouds.test_gcp_driver import _req, cloud, gce, home  # noqa: F401  (fixtures)
from tests.fakes.gce import FakeGCE, compute_discovery_path, compute_spec

pytestmark = pytest.mark.anyio


def _meta(body: dict[str, Any]) -> dict[str, str]:
    return {i["key"]: i["value"] for i in body["metadata"]["items"]}


async def test_cpu_only_spot_vm_is_accepted(cloud: GCPCloud, gce: FakeGCE) -> None:
    prov = cloud.provisioner()
    handle = await prov.provision(_req("spotcpu", spot=True), lambda _m: None)
    sched = gce.inserts[-1]["scheduling"]
    assert sched["onHostMaintenance"] == "TERMINATE" and sched["automaticRestart"] is False
    assert gce.rejected == []
    await prov.terminate(handle, lambda _m: None)


def test_a_refused_body_is_not_blamed_on_the_zone() -> None:
    err = classify(GCEError(400, [("invalid", "Invalid value for field 'resource.scheduling."
                                   "onHostMaintenance': 'MIGRATE'. Scheduling must have preemptible "
                                   "be false when OnHostMaintenance isn't TERMINATE.")]),
                   where="gcp/us-central1/us-central1-a")
    assert isinstance(err, ResourcesUnavailableError) and err.scope == "stop", err


async def test_fake_refuses_spot_with_migrate_as_the_api_does(gce: FakeGCE, cloud: GCPCloud) -> None:
    api = await cloud.provisioner().api()
    body = instance_body(_req("mig", spot=True), 0, "us-central1-a", ssh_user="skyd", public_key="k")
    body["scheduling"]["onHostMaintenance"] = "MIGRATE"
    with pytest.raises(GCEError) as ei:
        await api.call("POST", "zones/us-central1-a/instances", body=body)
    assert ei.value.status == 400 and "TERMINATE" in str(ei.value)
    assert classify(ei.value, where="gcp/us-central1/us-central1-a").scope == "stop"  # type: ignore[attr-defined]


async def test_b200_and_h200_boot_from_hyperdisk(cloud: GCPCloud, gce: FakeGCE) -> None:
    prov = cloud.provisioner()
    for itype, acc in (("a4-highgpu-8g", "B200"), ("a3-ultragpu-8g", "H200")):
        b = instance_body(_req("hd", itype, acc=acc, count=8), 0, "us-central1-b", ssh_user="skyd",
                          public_key="k")
        assert b["disks"][0]["initializeParams"]["diskType"].endswith("/hyperdisk-balanced")
    b = instance_body(_req("pd", "a3-highgpu-8g", acc="H100", count=8), 0, "us-central1-b",
                      ssh_user="skyd", public_key="k")
    assert b["disks"][0]["initializeParams"]["diskType"].endswith("/pd-balanced")
    handle = await prov.provision(_req("b200", "a4-highgpu-8g", "us-central1-b", acc="B200", count=8),
                                  lambda _m: None)
    assert gce.rejected == []
    await gpucheck.confirm(prov, handle)  # 8 B200 on the node, through the DLVM driver
    await prov.terminate(handle, lambda _m: None)


async def test_gpu_vm_gets_the_driver_and_its_agent_confirms_the_gpus(cloud: GCPCloud, gce: FakeGCE) -> None:
    prov = cloud.provisioner()
    handle = await prov.provision(_req("drv", "n1-highmem-8", acc="T4", count=2), lambda _m: None)
    assert _meta(gce.inserts[-1])["install-nvidia-driver"] == "True"
    await gpucheck.confirm(prov, handle)
    assert handle.extra[gpucheck.CONFIRMED] is True
    await prov.terminate(handle, lambda _m: None)
    assert "install-nvidia-driver" not in _meta(instance_body(_req("c"), 0, "z", ssh_user="u", public_key="k"))


async def test_a_user_image_without_driver_fails_with_the_image_named(cloud: GCPCloud, gce: FakeGCE) -> None:
    prov = cloud.provisioner()
    req = _req("noimg", "n1-highmem-8", acc="T4", count=1, image_id="my-plain-debian")
    handle = await prov.provision(req, lambda _m: None)
    with pytest.raises(ResourcesUnavailableError) as ei:
        await gpucheck.confirm(prov, handle, image=req.image_id, user_image=True)
    e = ei.value
    assert e.scope == "stop" and e.field == "resources.image_id"
    assert "gcp/us-central1/us-central1-a" in e.message and "my-plain-debian" in e.message
    assert "nvidia-smi" in e.message and "NVIDIA driver" in e.message, e.message
    await prov.terminate(handle, lambda _m: None)
    gce.driver_images.add("global/images/my-cuda-image")  # an image with the driver passes
    handle = await prov.provision(_req("cuda", "n1-highmem-8", acc="T4", count=1,
                                       image_id="my-cuda-image"), lambda _m: None)
    await gpucheck.confirm(prov, handle, image="my-cuda-image", user_image=True)
    await prov.terminate(handle, lambda _m: None)


async def test_os_login_project_gets_the_key_in_the_login_profile(cloud: GCPCloud, gce: FakeGCE) -> None:
    gce.enable_oslogin()  # the guest now ignores ssh-keys metadata
    prov = cloud.provisioner()
    logs: list[str] = []
    handle = await prov.provision(_req("osl"), logs.append)
    (user,) = gce.oslogin_keys
    assert handle.nodes[0].ssh and handle.nodes[0].ssh["user"] == user
    assert any("OS Login is enabled" in x for x in logs), logs
    from tests.clouds.test_gcp_driver import _healthy

    assert await _healthy(cloud, handle)
    await prov.terminate(handle, lambda _m: None)


def test_fake_validates_against_the_published_discovery_document() -> None:
    doc = json.loads(compute_discovery_path().read_text())
    assert doc["name"] == "compute" and doc["version"] == "v1"
    spec = compute_spec()
    body = instance_body(_req("v", spot=True), 0, "us-central1-a", ssh_user="skyd", public_key="k")
    assert spec.check(body, "Instance", method="compute.instances.insert") == []
    bad = json.loads(json.dumps(body))
    bad["scheduling"]["onHostMaintenace"] = "TERMINATE"  # a misspelt field
    bad["scheduling"]["provisioningModel"] = "PREEMPTIBLE"  # not in the enum
    bad["disks"][0]["initializeParams"]["diskSizeGb"] = "64GB"  # int64 as a string of digits
    bad["metadata"]["items"].append({"key": "no value"})
    errs = spec.check(bad, "Instance", "resource", method="compute.instances.insert")
    assert any("onHostMaintenace: unknown field" in e for e in errs), errs
    assert any("PREEMPTIBLE" in e for e in errs) and any("64GB" in e for e in errs), errs
    assert any("value: required" in e for e in errs) and any("'no value' does not match" in e for e in errs), errs


async def test_fake_answers_400_to_an_unknown_field(gce: FakeGCE, cloud: GCPCloud) -> None:
    api = await cloud.provisioner().api()
    body = instance_body(_req("unk"), 0, "us-central1-a", ssh_user="skyd", public_key="k")
    body["bootDisk"] = {"sizeGb": 10}
    with pytest.raises(GCEError) as ei:
        await api.call("POST", "zones/us-central1-a/instances", body=body)
    assert ei.value.status == 400 and "bootDisk: unknown field" in str(ei.value)
    assert gce.live() == []

