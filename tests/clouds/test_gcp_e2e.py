"""`skyd launch` on GCP end to end: a real daemon (network guard on: nothing outside
127.0.0.0/8 is reached, not even a lookup), the real CLI, the fake Compute API and token
endpoint, instances that are fake SSH hosts on 127.0.0.x running real node agents.
Failover walks exhausted zones and quota-limited regions; bad input gets one message with
the fix; `kill -9` of the daemon mid-provision leaves nothing behind after a restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gce import POINTS, FakeGCE
from tests.support.gcp import GEnv, gcp_module_env
from tests.support.launches import (
    cluster_row,
    failed_attempts,
    launch_events,
    nothing_left_on,
    request_events,
    submit_launch,
)
from tests.support.pipeline import cli, write

TASK = "resources:\n  infra: gcp/us-central1\n  cpus: 2\nrun: echo hello-from-gce $SKYPILOT_NODE_RANK\n"


@pytest.fixture(scope="module")
def gce(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGCE]:
    g = FakeGCE(tmp_path_factory.mktemp("gce"), first_ip=120).start()
    with nothing_left_on(g):
        yield g


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, gce: FakeGCE) -> Iterator[GEnv]:
    with gcp_module_env(tmp_path_factory, gce) as e:
        yield e


@pytest.fixture(autouse=True)
def fresh(gce: FakeGCE) -> Iterator[None]:
    gce.clear()
    gce.release()
    yield
    gce.clear()
    gce.release()


def _nothing_left(gce: FakeGCE) -> None:
    assert gce.live() == [] and gce.firewalls == {}, (gce.live(), gce.firewalls)


def test_launch_exec_down_through_the_gcp_driver(env: GEnv, gce: FakeGCE, tmp_path: Path) -> None:
    y = write(tmp_path / "t.yaml", TASK.replace("cpus: 2", "cpus: 2\nnum_nodes: 2"))
    r = env.ok("launch", "-y", "-c", "g1", str(y), timeout=180)
    assert "hello-from-gce 0" in r.stdout and "hello-from-gce 1" in r.stdout, r.stdout
    row = env.status("g1")
    assert row is not None and row["status"] == "UP" and row["cloud"] == "gcp"
    assert len(gce.live()) == 2 and all(ip.startswith("127.0.0.") for ip in gce.handed_out)
    r = env.ok("exec", "g1", "echo exec-on-gce")
    assert "exec-on-gce" in r.stdout
    env.ok("stop", "g1", "-y")
    assert env.status("g1")["status"] == "STOPPED"  # type: ignore[index]
    assert {i["status"] for i in gce.live()} == {"TERMINATED"}
    env.ok("start", "g1", "-y", timeout=120)
    assert {i["status"] for i in gce.live()} == {"RUNNING"}
    r = env.ok("exec", "g1", "echo after-start-$SKYPILOT_NODE_RANK")
    assert "after-start-0" in r.stdout and "after-start-1" in r.stdout, r.stdout
    env.ok("status", "-r")  # query + agent repair pass over SSH
    assert env.status("g1")["status"] == "UP"  # type: ignore[index]
    env.ok("down", "g1", "-y")
    _nothing_left(gce)


def test_spot_preemption_is_seen_and_nothing_is_left(env: GEnv, gce: FakeGCE, tmp_path: Path) -> None:
    y = write(tmp_path / "spot.yaml", TASK.replace("cpus: 2", "cpus: 2\n  use_spot: true"))
    env.ok("launch", "-y", "-c", "gspot", str(y), timeout=180)
    (inst,) = gce.live()
    assert inst["scheduling"]["provisioningModel"] == "SPOT"
    gce.preempt(inst["name"])
    env.ok("status", "-r")
    assert env.status("gspot") is None  # the provider said preempted: the cluster is gone
    _nothing_left(gce)  # and so is its firewall rule


def test_failover_walks_exhausted_zones_then_a_quota_limited_region(
    env: GEnv, gce: FakeGCE, tmp_path: Path
) -> None:
    for z in ("us-central1-a", "us-central1-b"):
        gce.fail(z, "ZONE_RESOURCE_POOL_EXHAUSTED", f"The zone '{z}' does not have enough resources")
    gce.fail("us-central1-c", "QUOTA_EXCEEDED", "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1.")
    gce.fail("us-central1-f", "ZONE_RESOURCE_POOL_EXHAUSTED", "never tried: the region is blocked")
    inserts = len(gce.inserts)
    task = TASK.replace("infra: gcp/us-central1", "infra: gcp")
    evs = launch_events(tmp_path, "gfo", task)
    assert evs[-1]["type"] == "result", evs[-3:]
    # us-central1 is the cheapest region for 2 vCPUs: its zones one by one, then the quota
    # rules out the region (no other us-central1 zone is tried) and the next region works.
    assert failed_attempts(evs) == [("gcp/us-central1/us-central1-a", "zone"), ("gcp/us-central1/us-central1-b", "zone"),
                            ("gcp/us-central1/us-central1-c", "region")]
    assert "us-central1-f" not in {b["zone"] for b in gce.inserts[inserts:]}
    row = env.status("gfo")
    assert row is not None and row["status"] == "UP" and row["region"] != "us-central1", row
    logs = " ".join(e.get("text", "") + e.get("error", "") for e in evs)
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in logs and "QUOTA_EXCEEDED" in logs
    tag = cluster_row(env.home, "gfo")["tag"]  # type: ignore[index]
    assert len(gce.live()) == 1 and len(gce.live(tag)) == 1  # the failed attempts left nothing
    env.ok("down", "gfo", "-y")
    _nothing_left(gce)


def _launch_fails(tmp_path: Path, name: str, task: str) -> Any:
    y = write(tmp_path / f"{name}.yaml", task)
    return cli("launch", "-y", "-c", name, str(y), timeout=120)


def test_bad_input_one_message_with_the_fix_nothing_left(env: GEnv, gce: FakeGCE, tmp_path: Path) -> None:
    # a region that does not exist
    r = _launch_fails(tmp_path, "gbad1", TASK.replace("gcp/us-central1", "gcp/us-nowhere9"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "us-nowhere9" in r.stderr, r.stderr
    # an instance type absent from the (pinned) zone
    gce.absent("us-central1-a", "n2-standard-2")
    r = _launch_fails(tmp_path, "gbad2", TASK.replace("gcp/us-central1", "gcp/us-central1/us-central1-a")
                      .replace("cpus: 2", "instance_type: n2-standard-2"))
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    assert "not offered in this zone" in r.stderr and "does not exist in zone" in r.stderr, r.stderr
    _nothing_left(gce)
    # the project's global GPU quota
    gce.fail("us-central1-a", "QUOTA_EXCEEDED", "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.")
    r = _launch_fails(tmp_path, "gbad3", "resources:\n  infra: gcp/us-central1/us-central1-a\n"
                      "  accelerators: T4:1\nrun: nvidia-smi\n")
    assert r.returncode == 4 and "GPUS_ALL_REGIONS" in r.stderr and "quota" in r.stderr.lower(), r.stderr
    assert "Traceback" not in r.stderr
    _nothing_left(gce)
    # refused (expired / revoked) credentials: the cloud is blocked, the launch fails clearly
    gce.clear()
    gce.revoke()
    gce.refuse_tokens = True
    r = _launch_fails(tmp_path, "gbad4", TASK)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "refused the credentials" in r.stderr and "gcloud auth application-default login" in r.stderr, r.stderr
    gce.refuse_tokens = False
    rows = {x["infra"]: x for x in json.loads(env.ok("check", "-o", "json").stdout)}
    assert rows["gcp"]["launch"] is True  # `skyd check` probes again and clears the block
    _nothing_left(gce)
    for n in ("gbad1", "gbad2", "gbad3", "gbad4"):
        assert env.status(n) is None


@pytest.mark.parametrize("point", POINTS)
def test_kill9_mid_provision_then_restart_leaves_nothing(
    env: GEnv, gce: FakeGCE, tmp_path: Path, point: str
) -> None:
    name = f"gk9-{point.replace('_', '-')}"
    gce.pause_at(point)
    rid = submit_launch(tmp_path, name, TASK)
    assert gce.reached.wait(60), f"the launch never reached {point}"
    row = cluster_row(env.home, name)
    assert row is not None and row["handle"] is None and row["cloud"] == "gcp"
    tag = row["tag"]
    env.kill9_daemon()
    gce.release()
    env.start_daemon()
    evs = request_events(rid)
    assert evs[-1]["type"] == "result", evs[-3:]
    row = cluster_row(env.home, name)
    assert row is not None and row["status"] == "UP"
    if row["tag"] != tag:  # the resumed launch removed the first attempt and started over
        assert gce.live(tag) == []
    handle = json.loads(row["handle"])
    assert {i["name"] for i in gce.live()} == {n["instance_id"] for n in handle["nodes"]}
    assert len(gce.firewalls) == 1
    assert "hello-from-gce" in env.ok("logs", name, "1", "--no-follow").stdout
    env.ok("down", name, "-y")
    _nothing_left(gce)


GPU_TASK = ("resources:\n  infra: gcp/us-central1/us-central1-a\n  accelerators: T4:1\n"
            "run: nvidia-smi --query-gpu=name --format=csv,noheader\n")


def test_gpu_nodes_prove_their_gpus_before_the_cluster_is_up(env: GEnv, gce: FakeGCE, tmp_path: Path) -> None:
    """The pipeline asks every node's agent for its GPUs (any provider): the default Deep
    Learning VM image with the driver metadata shows the T4; a user image without the NVIDIA
    driver fails the launch naming the provider, the location and the image, nothing left."""
    y = write(tmp_path / "gpu.yaml", GPU_TASK)
    r = env.ok("launch", "-y", "-c", "ggpu", str(y), timeout=180)
    assert "Tesla T4" in r.stdout, r.stdout
    assert "GPUs confirmed by the node agents: T4:1 per node" in r.stdout + r.stderr, r.stdout
    assert {i["key"]: i["value"] for i in gce.inserts[-1]["metadata"]["items"]}["install-nvidia-driver"] == "True"
    env.ok("down", "ggpu", "-y")
    _nothing_left(gce)
    r = _launch_fails(tmp_path, "gnodrv", GPU_TASK.replace("T4:1\n", "T4:1\n  image_id: my-plain-debian\n"))
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    for words in ("gcp/us-central1/us-central1-a", "my-plain-debian", "nvidia-smi", "resources.image_id"):
        assert words in r.stderr, (words, r.stdout, r.stderr)
    assert env.status("gnodrv") is None
    _nothing_left(gce)
