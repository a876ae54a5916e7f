"""The gcp driver against the fake Compute API (tests/fakes/gce.py), in this process: the
instance and firewall bodies it sends, stop/start/delete and preemption seen by `query`,
each GCE error's failover scope, `forget` by label, and the credential checks. Instances
are fake SSH hosts on 127.0.0.x running real node agents; nothing outside 127.0.0.0/8 is
ever reached (the network guard refuses it, and each test asserts nothing was refused)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from skyd.clouds.base import (
    NODE_PREEMPTED,
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    ProvisionRequest,
)
from skyd.clouds.gcp.cloud import GCPCloud
from skyd.clouds.gcp.instances import instance_body
from skyd.clouds.offering import Offering
from skyd.errors import CredentialsError, ResourcesUnavailableError
from tests.fakes.gce import FakeGCE
from tests.support.gcp import gcp_environ, netguard

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def gce(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGCE]:
    g = FakeGCE(tmp_path_factory.mktemp("gce")).start()
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gcphome")  # one SKYD_HOME: the agent zipapp is built once


@pytest.fixture
async def cloud(gce: FakeGCE, home: Path, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[GCPCloud]:
    creds = gce.service_account_file(tmp_path / "sa.json")
    for k, v in gcp_environ(gce, creds, tmp_path / "guard.log").items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SKYD_NETGUARD_LOG")
    monkeypatch.setenv("SKYD_HOME", str(home))
    monkeypatch.setenv("SKYD_CONFIG_DIR", str(tmp_path / "config"))
    for k in ("GOOGLE_CLOUD_PROJECT", "SKYD_GCP_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(k, raising=False)
    gce.clear()
    before = len(netguard.VIOLATIONS)
    c = GCPCloud()
    try:
        yield c
    finally:
        await c.close()
        gce.clear()
    assert netguard.VIOLATIONS[before:] == []
    assert gce.live() == [] and gce.firewalls == {}, (gce.live(), gce.firewalls)


def _req(name: str, itype: str = "n2-standard-2", zone: str = "us-central1-a", *, n: int = 1,
         acc: str | None = None, count: float = 0, spot: bool = False, **kw: Any) -> ProvisionRequest:
    off = Offering("gcp", itype, acc, count, 8, 52, zone.rsplit("-", 1)[0], zone, 0.5, 0.2)
    return ProvisionRequest(cluster_name=name, num_nodes=n, offering=off, use_spot=spot,
                            token="tok-" + name, tag=f"{name}-abc123", **kw)


async def _healthy(cloud: GCPCloud, handle: Any) -> bool:
    from skyd.nodeagent.client import AgentClient

    for rank in range(len(handle.nodes)):
        host, port = await cloud.provisioner().agent_endpoint(handle, rank)
        assert host.startswith("127.")
        async with AgentClient(host, port, handle.token) as c:
            if not await c.health(timeout=10):
                return False
    return True


async def test_gpu_spot_instance_with_labels_and_ports_then_stop_start_preempt_delete(
    cloud: GCPCloud, gce: FakeGCE
) -> None:
    prov = cloud.provisioner()
    req = _req("gpu1", "n1-highmem-8", acc="T4", count=1, spot=True, ports=("8080",),
               labels=(("Team", "ML Research"),), disk_size=64, user="Jane.Doe")
    handle = await prov.provision(req, lambda _m: None)
    body = gce.inserts[-1]
    assert body["guestAccelerators"] == [{"acceleratorType": "zones/us-central1-a/acceleratorTypes/nvidia-tesla-t4",
                                          "acceleratorCount": 1}]
    sched = body["scheduling"]
    assert (sched["onHostMaintenance"], sched["provisioningModel"], sched["instanceTerminationAction"]) == (
        "TERMINATE", "SPOT", "DELETE")
    labels = body["labels"]
    assert labels["skyd-cluster"] == "gpu1-abc123" and labels["skyd-rank"] == "0"
    assert labels["team"].startswith("ml-research")  # made a valid label value
    assert labels["skypilot-user"].startswith("jane-doe")  # who launched it, a valid value
    assert body["disks"][0]["initializeParams"]["diskSizeGb"] == "64"
    assert "deeplearning-platform-release" in body["disks"][0]["initializeParams"]["sourceImage"]
    ssh_keys = next(i["value"] for i in body["metadata"]["items"] if i["key"] == "ssh-keys")
    assert ssh_keys.startswith("skyd:ssh-ed25519 ")
    (fw,) = gce.firewalls.values()
    assert fw["allowed"] == [{"IPProtocol": "tcp", "ports": ["22", "8080"]}]
    assert fw["targetTags"] == body["tags"]["items"]
    (node,) = handle.nodes
    assert node.internal_ip.startswith("127.0.0.") and node.internal_ip in gce.handed_out
    assert await _healthy(cloud, handle)
    assert await prov.query(handle) == [NODE_RUNNING]

    await prov.open_ports(handle, ["9000-9010"])
    assert gce.firewalls[fw["name"]]["allowed"][0]["ports"] == ["22", "8080", "9000-9010"]

    await prov.stop(handle, lambda _m: None)
    assert await prov.query(handle) == [NODE_STOPPED]
    handle = await prov.start(handle, lambda _m: None)
    assert await prov.query(handle) == [NODE_RUNNING] and await _healthy(cloud, handle)

    gce.preempt(handle.nodes[0].instance_id)
    assert await prov.query(handle) == [NODE_PREEMPTED]  # gone, and GCE says it was preempted
    await prov.terminate(handle, lambda _m: None)  # the firewall rule; idempotent
    await prov.terminate(handle, lambda _m: None)


async def test_two_nodes_found_again_by_label(cloud: GCPCloud, gce: FakeGCE) -> None:
    prov = cloud.provisioner()
    req = _req("two", n=2)
    h1 = await prov.provision(req, lambda _m: None)
    inserts = len(gce.inserts)
    h2 = await prov.provision(req, lambda _m: None)  # a resumed launch: nothing new is made
    assert len(gce.inserts) == inserts
    assert [n.instance_id for n in h1.nodes] == [n.instance_id for n in h2.nodes]
    assert h2.nodes[0].extra["listen_host"] == h2.nodes[0].internal_ip  # workers reach the head
    assert await _healthy(cloud, h2)
    await prov.terminate(h2, lambda _m: None)
    assert await prov.query(h2) == [NODE_TERMINATED, NODE_TERMINATED]  # deleted, not preempted


async def test_a_reused_address_with_a_new_host_key_is_accepted(cloud: GCPCloud, gce: FakeGCE) -> None:
    prov = cloud.provisioner()
    h1 = await prov.provision(_req("reuse1"), lambda _m: None)
    await prov.terminate(h1, lambda _m: None)
    last = int(h1.nodes[0].internal_ip.rsplit(".", 1)[1])
    gce.reuse_ips_from(last)  # the next VM gets the same address (and a new host key)
    h2 = await prov.provision(_req("reuse2"), lambda _m: None)
    assert h2.nodes[0].internal_ip == h1.nodes[0].internal_ip
    assert await _healthy(cloud, h2)
    await prov.terminate(h2, lambda _m: None)
    gce.reuse_ips_from(last + 1)


def test_accelerator_optimized_types_carry_their_gpus() -> None:
    for itype, acc, count in (("a2-highgpu-1g", "A100", 1), ("a3-highgpu-8g", "H100", 8),
                              ("g2-standard-4", "L4", 1)):
        b = instance_body(_req("x", itype, acc=acc, count=count), 0, "us-central1-a",
                          ssh_user="skyd", public_key="ssh-ed25519 AAAA")
        assert "guestAccelerators" not in b and b["scheduling"]["onHostMaintenance"] == "TERMINATE"
        assert b["machineType"] == f"zones/us-central1-a/machineTypes/{itype}"
    b = instance_body(_req("x"), 0, "us-central1-a", ssh_user="skyd", public_key="k")
    assert b["scheduling"] == {"automaticRestart": True, "onHostMaintenance": "MIGRATE"}
    assert "debian-cloud" in b["disks"][0]["initializeParams"]["sourceImage"]


CASES = [
    ("ZONE_RESOURCE_POOL_EXHAUSTED", "The zone 'projects/p/zones/us-central1-a' does not have enough "
     "resources available to fulfill the request.", "zone"),
    ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "The zone does not have enough resources "
     "available to fulfill the request. '(resource type:compute)'.", "zone"),
    ("QUOTA_EXCEEDED", "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.", "cloud"),
    ("QUOTA_EXCEEDED", "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1.", "region"),
    ("RESOURCE_NOT_READY", "The resource is not ready", "zone"),
    ("UNSUPPORTED_OPERATION", "The VM was preempted while it was being created", "zone"),
    ("VPC_NOT_FOUND", "The network default was not found", "cloud"),
    ("SOMETHING_NEW", "an error nobody has seen", "zone"),
]


@pytest.mark.parametrize(("code", "message", "scope"), CASES)
async def test_errors_map_to_failover_scopes_and_forget_leaves_nothing(
    cloud: GCPCloud, gce: FakeGCE, code: str, message: str, scope: str
) -> None:
    prov = cloud.provisioner()
    gce.fail("us-central1-a", code, message, skip=1)  # rank 0 is made, rank 1 is refused
    req = _req("err", n=2)
    with pytest.raises(ResourcesUnavailableError) as ei:
        await prov.provision(req, lambda _m: None)
    assert ei.value.scope == scope
    assert code in (ei.value.provider_message or "") and message.split()[0] in (ei.value.provider_message or "")
    assert len(gce.live(req.cluster_tag)) == 1  # what the attempt made is still there...
    await prov.forget(req.partial())
    assert gce.live() == [] and gce.firewalls == {}  # ...and forget found it by label


async def test_permission_denied_and_absent_machine_type(cloud: GCPCloud, gce: FakeGCE) -> None:
    prov = cloud.provisioner()
    gce.fail("us-central1-b", "IAM_PERMISSION_DENIED", "Required 'compute.instances.create' permission")
    req = _req("perm", zone="us-central1-b")
    with pytest.raises(CredentialsError, match="compute.instances.create"):
        await prov.provision(req, lambda _m: None)
    await prov.forget(req.partial())
    gce.absent("us-central1-c", "a2-highgpu-1g")
    req = _req("absent", "a2-highgpu-1g", zone="us-central1-c", acc="A100", count=1)
    with pytest.raises(ResourcesUnavailableError) as ei:
        await prov.provision(req, lambda _m: None)
    assert ei.value.scope == "zone" and "not offered in this zone" in ei.value.message
    assert "does not exist in zone 'us-central1-c'" in (ei.value.provider_message or "")
    await prov.forget(req.partial())


async def test_check_credentials(cloud: GCPCloud, gce: FakeGCE, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ok, why = await cloud.check()
    assert ok and "skyd-test-project" in why, why
    # an expired token is fetched again once (401 on the call, then a fresh token)
    gce.revoke()
    assert (await cloud.check())[0]
    # refused credentials (a revoked or expired key)
    gce.revoke()
    gce.refuse_tokens = True
    ok, why = await GCPCloud().check()
    assert not ok and "refused the credentials" in why and "gcloud auth application-default login" in why
    gce.refuse_tokens = False
    # missing credentials: no network at all
    requests = gce.token_requests
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "nope.json"))
    ok, why = await GCPCloud().check()
    assert not ok and "does not exist" in why and gce.token_requests == requests
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    ok, why = await GCPCloud().check()
    assert not ok and "no GCP credentials found" in why and gce.token_requests == requests
    # a project that does not exist
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(gce.service_account_file(tmp_path / "b.json")))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "no-such-project")
    ok, why = await GCPCloud().check()
    assert not ok and "'no-such-project' does not exist" in why


@pytest.mark.parametrize(("errors", "scope"), [
    ([("notFound", "The resource 'projects/p/global/images/my-img' was not found")], "stop"),
    ([("SUBNET_NOT_FOUND_FOR_VPC", "no subnet in us-east1")], "region"),
    ([("invalid", "Requested disk size cannot be smaller than the image size (100 GB)")], "cloud"),
    ([("notFound", "The resource 'projects/p/zones/z/acceleratorTypes/nvidia-tesla-v100' was not found")], "zone"),
    # the widest scope any entry implies wins
    ([("ZONE_RESOURCE_POOL_EXHAUSTED", "no capacity"), ("QUOTA_EXCEEDED", "Quota 'CPUS' exceeded")], "region"),
])
def test_classify_more_codes(errors: list[tuple[str, str]], scope: str) -> None:
    from skyd.clouds.gcp.api import GCEError
    from skyd.clouds.gcp.classify import classify

    err = classify(GCEError(400, errors), where="gcp/us-east1/us-east1-b")
    assert isinstance(err, ResourcesUnavailableError) and err.scope == scope
    if scope == "stop":
        assert err.field == "resources.image_id" and err.hint and "images list" in err.hint


def test_classify_401_is_a_credentials_error() -> None:
    from skyd.clouds.gcp.api import GCEError
    from skyd.clouds.gcp.classify import classify

    assert isinstance(classify(GCEError(401, [("authError", "bad token")]), where="gcp/x"), CredentialsError)
