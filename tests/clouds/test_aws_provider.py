"""The aws provider against moto's server through the proxy (tests/fakes/awsproxy.py), in
this process: the whole lifecycle with agents over SSH on loopback fake hosts, tags, spot,
ports, EC2 errors -> failover scopes, bad input, catalog refresh. After every test nothing
skyd made is left in moto."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyd.clouds.base import ProvisionRequest
from skyd.clouds.offering import Offering
from skyd.errors import CredentialsError, InvalidSpecError, ResourcesUnavailableError
from tests.support.aws import REGION, Cloud, fake_aws

pytestmark = pytest.mark.anyio

M6I = Offering("aws", "m6i.large", None, 0, 2, 8, REGION, "use1-az1", 0.096, 0.03)


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with fake_aws(tmp_path_factory.mktemp("aws"), hosts=2) as c:
        yield c


@pytest.fixture
def env(aws: Cloud, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cloud]:
    monkeypatch.setenv("SKYD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SKYD_CONFIG_DIR", str(tmp_path / "config"))
    for k, v in aws.env.items():
        monkeypatch.setenv(k, v)
    aws.proxy.clear_failures()
    yield aws
    aws.proxy.clear_failures()
    assert aws.leftovers() == {}, "skyd left objects in moto"


async def _cloud() -> Any:
    from skyd.clouds.aws.cloud import AWSCloud

    return AWSCloud()


def _req(name: str, n: int = 1, off: Offering = M6I, **kw: Any) -> ProvisionRequest:
    return ProvisionRequest(name, n, off, kw.pop("use_spot", False), token="t0k3n", tag=f"{name}-x1", **kw)


async def test_launch_run_stop_start_terminate_over_ssh(env: Cloud) -> None:
    from skyd.nodeagent.client import AgentClient

    cloud = await _cloud()
    prov = cloud.provisioner()
    logs: list[str] = []
    try:
        h = await prov.provision(_req("aws-life", 2, ports=("8080", "9000-9001"), user="alice"),
                                 logs.append)
        assert [n.rank for n in h.nodes] == [0, 1] and h.zone == "us-east-1b"  # use1-az1
        assert all(n.ssh and n.ssh["host"].startswith("127.0.0.") for n in h.nodes)  # loopback only
        ec2 = env.boto()
        insts = [i for r in ec2.describe_instances(InstanceIds=[n.instance_id for n in h.nodes])["Reservations"]
                 for i in r["Instances"]]
        tags = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in insts]
        assert {t["skyd-cluster"] for t in tags} == {"aws-life-x1"}
        assert {t["skypilot-user"] for t in tags} == {"alice"}  # who launched it, as SkyPilot
        assert sorted((t["skyd-rank"], t["Name"]) for t in tags) == [("0", "aws-life-head"), ("1", "aws-life-worker1")]
        assert len({i["SubnetId"] for i in insts}) == 1  # one subnet
        sg = ec2.describe_security_groups(GroupNames=["skyd-aws-life-x1"])["SecurityGroups"][0]
        ports = {(p.get("FromPort"), p.get("ToPort")) for p in sg["IpPermissions"]}
        assert {(22, 22), (8080, 8080), (9000, 9001)} <= ports
        await prov.open_ports(h, ["7000"])
        sg = ec2.describe_security_groups(GroupNames=["skyd-aws-life-x1"])["SecurityGroups"][0]
        assert (7000, 7000) in {(p.get("FromPort"), p.get("ToPort")) for p in sg["IpPermissions"]}
        assert await prov.query(h) == ["running", "running"]
        host, port = await prov.agent_endpoint(h, 0)
        async with AgentClient(host, port, h.token) as c:
            assert await c.health(timeout=10)
        key = Path(os.environ["SKYD_HOME"]) / "aws" / "id_ed25519"
        assert key.stat().st_mode & 0o777 == 0o600
        await prov.stop(h, logs.append)
        assert await prov.query(h) == ["stopped", "stopped"]
        h = await prov.start(h, logs.append)
        assert await prov.query(h) == ["running", "running"]
        # provisioning the same cluster again finds its instances by tag
        again = await prov.provision(_req("aws-life", 2, ports=("8080",)), logs.append)
        assert [n.instance_id for n in again.nodes] == [n.instance_id for n in h.nodes]
        from skyd.transports.ssh import known_hosts_path

        port = h.nodes[0].ssh["port"]  # type: ignore[index]
        assert f"[127.0.0.2]:{port} " in known_hosts_path().read_text()
        await prov.terminate(h, logs.append)
        assert await prov.query(h) == ["terminated", "terminated"]
        # EC2 reuses addresses: the terminated nodes' host keys are forgotten
        assert f"[127.0.0.2]:{port} " not in known_hosts_path().read_text()
    finally:
        await cloud.close()


async def test_ensure_agents_restarts_a_killed_agent(env: Cloud) -> None:
    import json
    import signal

    from skyd.nodeagent.client import AgentClient

    cloud = await _cloud()
    prov = cloud.provisioner()
    try:
        h = await prov.provision(_req("aws-repair"), lambda _m: None)
        info = Path(h.nodes[0].node_dir) / "agent.json"  # the fake host's files are local
        pid = int(json.loads(info.read_text())["pid"])
        os.kill(pid, signal.SIGKILL)
        logs: list[str] = []
        h = await prov.ensure_agents(h, logs.append)  # what status -r does
        assert any("agent started" in m for m in logs), logs
        assert int(json.loads(info.read_text())["pid"]) != pid
        host, port = await prov.agent_endpoint(h, 0)
        async with AgentClient(host, port, h.token) as c:
            assert await c.health(timeout=10)
        await prov.terminate(h, lambda _m: None)
    finally:
        await cloud.close()


async def test_spot_goes_through_instance_market_options(env: Cloud) -> None:
    cloud = await _cloud()
    prov = cloud.provisioner()
    prov.deploy_agents = False
    try:
        h = await prov.provision(_req("aws-spot", use_spot=True), lambda _m: None)
        run = env.proxy.run_requests[-1]
        assert run["InstanceMarketOptions.MarketType"] == "spot"
        assert run["InstanceMarketOptions.SpotOptions.SpotInstanceType"] == "one-time"
        assert h.use_spot and h.hourly_cost == pytest.approx(0.03)
        from skyd.errors import ClusterStateError

        with pytest.raises(ClusterStateError, match="cannot be stopped"):
            await prov.stop(h, lambda _m: None)
        await prov.terminate(h, lambda _m: None)
    finally:
        await cloud.close()


async def test_skyds_key_is_made_once_under_concurrent_launches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    from skyd.clouds.aws.network import key_path, ssh_key

    monkeypatch.setenv("SKYD_HOME", str(tmp_path / "home"))
    got: list[str] = []

    async def one() -> None:
        got.append((await ssh_key())[1])

    async with anyio.create_task_group() as tg:
        for _ in range(16):
            tg.start_soon(one)
    assert len(set(got)) == 1 and got[0].startswith("ssh-ed25519 ")
    assert key_path().stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in key_path().parent.iterdir()) == ["id_ed25519", "id_ed25519.pub"]


async def test_multi_node_in_one_subnet_with_a_placement_group_when_asked(env: Cloud) -> None:
    cfg = Path(os.environ["SKYD_CONFIG_DIR"])
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "config.yaml").write_text("aws:\n  placement_group: true\n")
    cloud = await _cloud()
    prov = cloud.provisioner()
    prov.deploy_agents = False
    try:
        h = await prov.provision(_req("aws-pg", 3), lambda _m: None)
        run = env.proxy.run_requests[-1]
        assert run["Placement.GroupName"] == "skyd-aws-pg-x1" and run["MinCount"] == "3"
        assert run["NetworkInterface.1.SubnetId"]
        assert [n.rank for n in h.nodes] == [0, 1, 2]
        assert {n.extra["listen_host"] for n in h.nodes} == {n.internal_ip for n in h.nodes}
        assert env.proxy.placement_groups == {"skyd-aws-pg-x1"}
        await prov.terminate(h, lambda _m: None)
        assert env.proxy.placement_groups == set()
    finally:
        await cloud.close()


def test_query_maps_ec2_states_and_spot_interruptions() -> None:
    from skyd.clouds.aws.instances import node_state

    def inst(state: str, reason: str = "", spot: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {"State": {"Name": state}, "StateReason": {"Code": reason}}
        if spot:
            d["InstanceLifecycle"] = "spot"
        return d

    assert node_state(inst("pending")) == "pending"
    assert node_state(inst("running")) == "running"
    assert node_state(inst("stopping")) == "stopped" and node_state(inst("stopped")) == "stopped"
    assert node_state(inst("terminated")) == "terminated" and node_state(None) == "terminated"
    assert node_state(inst("terminated", "Server.SpotInstanceTermination", spot=True)) == "preempted"
    assert node_state(inst("stopped", "Server.SpotInstanceShutdown", spot=True)) == "preempted"
    assert node_state(inst("stopped", "Client.UserInitiatedShutdown")) == "stopped"


@pytest.mark.parametrize(("code", "scope"), [
    ("InsufficientInstanceCapacity", "zone"), ("Unsupported", "zone"), ("SpotMaxPriceTooLow", "zone"),
    ("InvalidParameterCombination", "zone"), ("VcpuLimitExceeded", "region"),
    ("MaxSpotInstanceCountExceeded", "region"),
])
async def test_ec2_errors_are_classified_into_scopes_and_nothing_leaks(
    env: Cloud, code: str, scope: str
) -> None:
    env.proxy.fail("us-east-1b", code)
    cloud = await _cloud()
    prov = cloud.provisioner()
    req = _req(f"aws-err-{code.lower()}")
    try:
        with pytest.raises(ResourcesUnavailableError) as ei:
            await prov.provision(req, lambda _m: None)
        assert ei.value.scope == scope
        assert ei.value.provider_message and ei.value.provider_message.startswith(code)
        if scope == "region":
            assert "quota" in (ei.value.hint or "")
        assert env.leftovers()  # the key pair and security group were made before RunInstances
        await prov.forget(req.partial())  # what the failover loop does next
    finally:
        await cloud.close()


async def test_credentials_refused_while_provisioning_block_the_cloud(env: Cloud) -> None:
    env.proxy.fail("us-east-1b", "AuthFailure")
    cloud = await _cloud()
    req = _req("aws-auth")
    try:
        with pytest.raises(CredentialsError, match="refused the credentials") as ei:
            await cloud.provisioner().provision(req, lambda _m: None)
        assert "aws configure" in (ei.value.hint or "")
        await cloud.provisioner().forget(req.partial())
    finally:
        await cloud.close()


async def test_check_missing_and_expired_credentials(env: Cloud, monkeypatch: pytest.MonkeyPatch) -> None:
    cloud = await _cloud()
    try:
        ok, why = await cloud.check()
        assert ok and "123456789012" in why
        env.proxy.fail("sts", "ExpiredToken")
        ok, why = await cloud.check()
        assert not ok and "ExpiredToken" in why and "aws sso login" in why
    finally:
        await cloud.close()
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    cloud = await _cloud()
    try:
        calls = sum(env.proxy.calls.values())
        ok, why = await cloud.check()
        assert not ok and "no AWS credentials found" in why and "AWS_ACCESS_KEY_ID" in why
        assert sum(env.proxy.calls.values()) == calls  # decided without a call
    finally:
        await cloud.close()


async def test_loopback_guard_refuses_other_endpoints(env: Cloud, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://ec2.us-east-1.amazonaws.com")
    cloud = await _cloud()
    try:
        ok, why = await cloud.check()
        assert not ok and "127.0.0.0/8" in why
    finally:
        await cloud.close()


def test_the_loopback_guard_refuses_a_non_loopback_node_without_dialling() -> None:
    from skyd.clouds.aws.provisioner import AWSProvisioner
    from skyd.clouds.base import NodeHandle

    node = NodeHandle(rank=0, instance_id="i-1", internal_ip="10.0.0.5",
                      ssh={"host": "10.0.0.5", "port": 22, "user": "ubuntu"})
    assert os.environ["SKYD_AWS_LOOPBACK_ONLY"] == "1"  # tests/conftest.py, for every test
    with pytest.raises(ResourcesUnavailableError, match="refusing to connect to 10.0.0.5"):
        AWSProvisioner()._transport(node)  # raised before any transport exists


def test_a_region_that_does_not_exist_is_refused_with_a_suggestion() -> None:
    from skyd.clouds.aws.cloud import AWSCloud

    with pytest.raises(InvalidSpecError, match="no region 'us-esat-1'") as ei:
        AWSCloud().validate_location("us-esat-1", None)
    assert ei.value.field == "resources.infra" and "us-east-1" in (ei.value.hint or "")
    AWSCloud().validate_location("eu-west-1", "euw1-az1")


async def test_wrong_architecture_and_missing_images_stop_before_anything_is_made(env: Cloud) -> None:
    x86 = "ami-760aaa0f"  # one of moto's x86_64 Amazon Linux images
    graviton = Offering("aws", "m6g.large", None, 0, 2, 8, REGION, "use1-az1", 0.077, None)
    cloud = await _cloud()
    try:
        with pytest.raises(ResourcesUnavailableError, match="built for x86_64, but m6g.large runs arm64") as ei:
            await cloud.provisioner().provision(_req("aws-arch", off=graviton, image_id=x86), lambda _m: None)
        assert ei.value.scope == "stop" and ei.value.field == "resources.image_id"
        assert "arm64 image" in (ei.value.hint or "")
        with pytest.raises(ResourcesUnavailableError, match="does not exist") as ei:
            await cloud.provisioner().provision(_req("aws-noimg", image_id="ami-12345678"), lambda _m: None)
        assert ei.value.scope == "stop"
        assert env.leftovers() == {}  # checked before any object was made
    finally:
        await cloud.close()


async def test_an_instance_type_absent_from_the_region_blocks_the_region(env: Cloud) -> None:
    off = Offering("aws", "p9.nonexistent", None, 0, 2, 8, REGION, "use1-az1", 1.0, None)
    cloud = await _cloud()
    try:
        with pytest.raises(ResourcesUnavailableError, match="not offered in this region") as ei:
            await cloud.provisioner().provision(_req("aws-notype", off=off), lambda _m: None)
        assert ei.value.scope == "region" and "show-gpus" in (ei.value.hint or "")
    finally:
        await cloud.close()


async def test_default_images_follow_the_accelerator_vendor(env: Cloud) -> None:
    from skyd.clouds.aws import images

    cloud = await _cloud()
    try:
        ec2 = await cloud.provisioner().ec2(REGION)
        gpu = await images.default_image(ec2, REGION, "A100", "x86_64")
        cpu = await images.default_image(ec2, REGION, None, "x86_64")
        assert "Deep Learning" in gpu["Name"] and "ubuntu" in cpu["Name"]
        notes: list[str] = []
        amd = await images.default_image(ec2, REGION, "MI300X", "x86_64", notes.append)
        assert amd["ImageId"] == cpu["ImageId"] and "no AMD image" in notes[0]  # moto has none
        calls = env.proxy.calls["DescribeImages"]
        assert (await images.default_image(ec2, REGION, "A100", "x86_64")) == gpu
        assert env.proxy.calls["DescribeImages"] == calls  # cached
    finally:
        await cloud.close()


async def test_catalog_refresh_from_the_describe_and_pricing_apis(env: Cloud) -> None:
    from skyd.clouds.aws.pricing import fetch_catalog

    cloud = await _cloud()
    try:
        rows = await fetch_catalog(cloud.provisioner().clients, regions=[REGION])
    finally:
        await cloud.close()
    m6i = [o for o in rows if o.instance_type == "m6i.large"]
    assert m6i and all(o.price == pytest.approx(0.096) and o.vcpus == 2 for o in m6i)
    assert {o.zone for o in m6i} <= {"use1-az1", "use1-az2", "use1-az3", "use1-az4", "use1-az5", "use1-az6"}
    p4d = [o for o in rows if o.instance_type == "p4d.24xlarge"]
    assert p4d and p4d[0].accelerator == "A100" and p4d[0].accelerator_count == 8
