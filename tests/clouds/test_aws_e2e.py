"""`skyd launch → exec → down` through the real daemon and CLI on the aws provider: moto's
server behind the proxy (capacity errors injected, instance addresses rewritten to
127.0.0.x where fake SSH hosts listen), so the whole run stays on loopback. Failover
across zones, a regional quota, and `kill -9` of the daemon mid-provision (before and
after RunInstances reached moto) leave nothing in moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.awsproxy import POINTS
from tests.support.aws import Cloud, fake_aws
from tests.support.launches import (
    cluster_row,
    failed_attempts,
    launch_events,
    request_events,
    submit_launch,
)
from tests.support.pipeline import Env, module_env, write

TASK = ("resources:\n  infra: aws/us-east-1\n  instance_type: m6i.large\n"
        "run: echo hello-aws rank=$SKYPILOT_NODE_RANK\n")
ZONES = {"use1-az6": "us-east-1a", "use1-az1": "us-east-1b", "use1-az2": "us-east-1c",
         "use1-az4": "us-east-1d", "use1-az5": "us-east-1f"}  # the catalog's zones of m6i.large


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    with fake_aws(tmp_path_factory.mktemp("aws-e2e"), hosts=2) as c:
        yield c


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, aws: Cloud) -> Iterator[Env]:
    with module_env(tmp_path_factory, **aws.env) as e:
        yield e
    assert aws.leftovers() == {}


@pytest.fixture(autouse=True)
def fresh(aws: Cloud) -> Iterator[None]:
    aws.proxy.clear_failures()
    aws.proxy.release()
    yield
    aws.proxy.clear_failures()
    aws.proxy.release()


def test_launch_exec_down_end_to_end_on_loopback(env: Env, aws: Cloud, tmp_path: Path) -> None:
    y = write(tmp_path / "t.yaml", TASK.replace("run:", "num_nodes: 2\nrun:"))
    r = env.ok("launch", "-c", "aws-e2e", "-y", str(y), timeout=180)
    assert "hello-aws rank=0" in r.stdout + r.stderr or "hello-aws" in env.ok(
        "logs", "aws-e2e", "1", "--no-follow").stdout
    row = cluster_row(env.home, "aws-e2e")
    assert row is not None and row["status"] == "UP"
    handle = json.loads(row["handle"])
    assert handle["cloud"] == "aws" and handle["region"] == "us-east-1"
    hosts = [n["ssh"]["host"] for n in handle["nodes"]]
    assert all(h.startswith("127.0.0.") for h in hosts)  # every address dialled is loopback
    r = env.ok("exec", "aws-e2e", "echo exec-on-$SKYPILOT_NODE_RANK", timeout=120)
    logs = env.ok("logs", "aws-e2e", "2", "--no-follow").stdout
    assert "exec-on-0" in logs + r.stdout and "exec-on-1" in logs + r.stdout
    assert aws.leftovers()["instances"]
    env.ok("down", "aws-e2e", "-y", timeout=120)
    assert aws.leftovers() == {}


def test_failover_across_exhausted_zones(env: Env, aws: Cloud, tmp_path: Path) -> None:
    exhausted = ["us-east-1b", "us-east-1c", "us-east-1d", "us-east-1f"]  # use1-az1, -az2, -az4, -az5
    for zone in exhausted:
        aws.proxy.fail(zone, "InsufficientInstanceCapacity")
    refused = len(aws.proxy.refused)
    evs = launch_events(tmp_path, "aws-fo", TASK)
    assert evs[-1]["type"] == "result", evs[-3:]
    assert [scope for _, scope in failed_attempts(evs)] == ["zone"] * 4
    assert sorted(z for z, _ in aws.proxy.refused[refused:]) == exhausted  # each tried once
    logs = " ".join(e.get("text", "") for e in evs)
    assert "InsufficientInstanceCapacity" in logs  # the provider's own words
    row = env.status("aws-fo")
    assert row is not None and row["status"] == "UP" and row["zone"] == "us-east-1a"
    assert len(aws.leftovers()["instances"]) == 1 and len(aws.leftovers()["security_groups"]) == 1
    env.ok("down", "aws-fo", "-y", timeout=120)
    assert aws.leftovers() == {}


def test_quota_exceeded_ends_with_the_fix_and_nothing_made(env: Env, aws: Cloud, tmp_path: Path) -> None:
    aws.proxy.fail("us-east-1", "VcpuLimitExceeded")
    from tests.support.daemon import cli

    y = write(tmp_path / "q.yaml", TASK)
    r = cli("launch", "-c", "aws-quota", "-y", str(y), timeout=120)
    assert r.returncode == 4, r
    assert "VcpuLimitExceeded" in r.stderr and "Service Quotas" in r.stderr
    assert "Traceback" not in r.stderr
    assert env.status("aws-quota") is None and aws.leftovers() == {}


def test_a_region_that_does_not_exist(env: Env, aws: Cloud, tmp_path: Path) -> None:
    from tests.support.daemon import cli

    y = write(tmp_path / "r.yaml", TASK.replace("aws/us-east-1", "aws/us-esat-1"))
    r = cli("launch", "-c", "aws-region", "-y", str(y), timeout=60)
    assert r.returncode == 2, r
    assert "no region 'us-esat-1'" in r.stderr and "us-east-1" in r.stderr
    assert aws.leftovers() == {}


@pytest.mark.parametrize("point", POINTS)
def test_kill9_mid_provision_then_restart_leaves_nothing(
    env: Env, aws: Cloud, tmp_path: Path, point: str
) -> None:
    name = f"aws-k9-{point.replace('_', '-')}"
    aws.proxy.pause_at(point)
    rid = submit_launch(tmp_path, name, TASK)
    assert aws.proxy.reached.wait(60), f"the launch never reached {point}"
    row = cluster_row(env.home, name)  # the partial handle was in SQLite before RunInstances
    assert row is not None and row["handle"] is None and row["cloud"] == "aws" and row["tag"]
    tag = row["tag"]
    env.kill9_daemon()
    aws.proxy.release()  # the held RunInstances completes for a client that is gone
    ec2 = aws.boto()

    def tagged() -> set[str]:
        flt = [{"Name": "tag:skyd-cluster", "Values": [tag]}]
        return {i["InstanceId"] for r in ec2.describe_instances(Filters=flt)["Reservations"]
                for i in r["Instances"] if i["State"]["Name"] != "terminated"}

    from tests.support.pipeline import wait_for

    first = wait_for(tagged, timeout=20)  # the orphan exists in moto now
    assert first
    env.start_daemon()
    evs = request_events(rid)
    assert evs[-1]["type"] == "result", evs[-3:]
    row = cluster_row(env.home, name)
    assert row is not None and row["status"] == "UP"
    now = {n["instance_id"] for n in json.loads(row["handle"])["nodes"]}
    assert tagged() == set() and not (first & now)  # the orphan was terminated
    assert set(aws.leftovers()["instances"]) == now  # only the cluster's own node is left
    env.ok("down", name, "-y", timeout=120)
    assert aws.leftovers() == {}


def test_catalog_refresh_aws_from_the_cli(env: Env, aws: Cloud, tmp_path: Path) -> None:
    from tests.support.daemon import cli

    home = tmp_path / "home"  # not the module daemon's: its catalog stays the bundled one
    r = cli("catalog", "refresh", "aws", env={"SKYD_HOME": str(home), "SKYD_AWS_CATALOG_REGIONS": "us-east-1"},
            timeout=120)
    assert r.returncode == 0, r.stderr
    assert "aws: wrote" in r.stdout
    (path,) = (home / "catalogs" / "aws").glob("*.csv")
    text = path.read_text()
    assert "m6i.large,,,2.0,8.0,,us-east-1,use1-az" in text and "p4d.24xlarge,A100,8.0" in text


def test_check_reports_expired_credentials_with_the_fix(env: Env, aws: Cloud) -> None:
    rows = {r["infra"]: r for r in json.loads(env.ok("check", "-o", "json").stdout)}
    assert rows["aws"]["launch"] is True and "123456789012" in rows["aws"]["reason"]
    aws.proxy.fail("sts", "ExpiredToken")
    rows = {r["infra"]: r for r in json.loads(env.ok("check", "-o", "json").stdout)}
    assert rows["aws"]["launch"] is False
    assert "ExpiredToken" in rows["aws"]["reason"] and "aws sso login" in rows["aws"]["reason"]
    aws.proxy.clear_failures()
    env.ok("check", "-o", "json")  # enabled again for the tests after this one


def test_missing_credentials_end_the_launch_with_the_fix(
    env: Env, aws: Cloud, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.support.daemon import cli

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k)
    calls = sum(aws.proxy.calls.values())
    with module_env(tmp_path_factory):  # a daemon of its own, without credentials
        y = write(tmp_path / "c.yaml", TASK)
        r = cli("launch", "-c", "aws-nocreds", "-y", str(y), timeout=120)
    assert r.returncode == 4, r
    assert "no AWS credentials found" in r.stderr and "AWS_ACCESS_KEY_ID" in r.stderr
    assert "Traceback" not in r.stderr
    assert sum(aws.proxy.calls.values()) == calls and aws.leftovers() == {}  # no call at all


def test_a_gpu_node_proves_its_gpus_and_an_ami_without_the_driver_is_named(
    env: Env, aws: Cloud, tmp_path: Path
) -> None:
    """The pipeline's GPU check runs on AWS too. The fake host behind an instance shows the
    instance type's GPUs (AWS's GpuInfo) to nvidia-smi only when its AMI carries the NVIDIA
    driver: the default Deep Learning AMI brings a g4dn up with its T4 confirmed; a plain
    Ubuntu AMI chosen by the task ends the launch naming the image and the field, and the
    attempt's instance is terminated."""
    task = ("resources:\n  infra: aws/us-east-1/use1-az6\n  instance_type: g4dn.xlarge\n"
            "run: nvidia-smi --query-gpu=name --format=csv,noheader\n")
    evs = launch_events(tmp_path, "awsgpu", task)
    text = json.dumps(evs)
    assert evs[-1]["type"] == "result", text[-2000:]
    assert "GPUs confirmed by the node agents: T4:1 per node" in text, evs[-3:]
    assert cluster_row(env.home, "awsgpu") is not None
    env.ok("down", "awsgpu", "-y")
    assert aws.leftovers() == {}
    plain = [i for i in aws.boto().describe_images(Owners=["amazon"])["Images"]
             if "ubuntu" in str(i.get("Name", "")).lower() and "deep learning" not in str(i.get("Name", "")).lower()]
    assert plain, "moto ships Ubuntu AMIs"
    ami = plain[0]["ImageId"]
    evs = launch_events(tmp_path, "awsnodrv", task.replace("g4dn.xlarge\n", f"g4dn.xlarge\n  image_id: {ami}\n"))
    assert evs[-1]["type"] == "error", evs[-3:]
    text = json.dumps(evs)
    assert "aws/us-east-1" in text and ami in text and "resources.image_id" in text, evs[-3:]
    assert "nvidia-smi" in text and "node 0 has no GPUs" in text, evs[-3:]
    assert cluster_row(env.home, "awsnodrv") is None
    assert aws.leftovers() == {}
