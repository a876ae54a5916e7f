"""The provisioning lifecycle end to end: a real daemon launching on the fake `testcloud`
(tests/fakes/testcloud, one folder + one registry line) and the fake preemptible cloud:
each failover scope, credential errors, the per-attempt deadline, the partial handle
written before the create call, and the leak pass after `kill -9` of the daemon at each
pause point of the fake's API (nothing left on the fake's side)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyd.sdk.transport import Client
from tests.fakes.testcloud import PLUGIN
from tests.fakes.testcloud.server import KEY, POINTS, FakeInstancesAPI
from tests.support.launches import (
    cluster_row,
    failed_attempts,
    launch_events,
    nothing_left_on,
    request_events,
    submit_launch,
)
from tests.support.pipeline import Env, module_env, write

HELLO = "run: echo hello-tc\n"


def _zone(target: str) -> str:
    """"testcloud/r1/r1-a (...)" -> "r1/r1-a": the zone of an attempt."""
    return target.split()[0].split("/", 1)[1]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeInstancesAPI]:
    a = FakeInstancesAPI(tmp_path_factory.mktemp("tcapi")).start()
    with nothing_left_on(a):
        yield a


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, api: FakeInstancesAPI) -> Iterator[Env]:
    with module_env(
        tmp_path_factory, SKYD_CLOUD_PLUGINS=PLUGIN, SKYD_EXTRA_PLUGINS="tests.fakes.preemptible",
        SKYD_TESTCLOUD_URL=api.url, SKYD_TESTCLOUD_KEY=KEY, SKYD_PROVISION_TIMEOUT_S="3",
    ) as e:
        yield e


@pytest.fixture(autouse=True)
def fresh(api: FakeInstancesAPI) -> Iterator[None]:
    api.clear_failures()
    api.release()
    yield
    api.clear_failures()
    api.release()


def _down(env: Env, api: FakeInstancesAPI, name: str) -> None:
    row = cluster_row(env.home, name)
    env.ok("down", name, "-y")
    if row and row.get("tag"):
        assert api.live(row["tag"]) == []


def test_failover_walks_zone_region_cloud(env: Env, api: FakeInstancesAPI, tmp_path: Path) -> None:
    api.fail("r1", "r1-a", "capacity_after_create")  # zone; leaves an instance to clean up
    api.fail("r1", "r1-b", "capacity")  # zone
    api.fail("r2", "r2-a", "quota")  # region: r2-b is never tried
    api.fail("r3", "r3-a", "outage")  # cloud: r3-b is never tried, the next cloud is
    creates = len(api.creates)
    evs = launch_events(tmp_path, "tc-fo", HELLO)
    assert evs[-1]["type"] == "result", evs[-3:]
    assert failed_attempts(evs, _zone) == [("r1/r1-a", "zone"), ("r1/r1-b", "zone"), ("r2/r2-a", "region"),
                            ("r3/r3-a", "cloud")]
    assert [(b["region"], b["zone"]) for b in api.creates[creates:]] == [
        ("r1", "r1-a"), ("r1", "r1-b"), ("r2", "r2-a"), ("r3", "r3-a")]
    logs = " ".join(e.get("text", "") for e in evs)
    assert "blocking the region" in logs and "QuotaExceeded" in logs  # the provider's words
    row = env.status("tc-fo")
    assert row is not None and row["status"] == "UP" and row["cloud"] == "fakecloud"
    assert api.live() == []  # the partly created attempt was removed
    assert "hello-tc" in env.ok("logs", "tc-fo", "1", "--no-follow").stdout
    _down(env, api, "tc-fo")


def test_stop_scope_ends_the_launch_with_the_providers_message(
    env: Env, api: FakeInstancesAPI, tmp_path: Path
) -> None:
    api.fail("r1", "r1-a", "invalid")
    creates = len(api.creates)
    evs = launch_events(tmp_path, "tc-stop", HELLO)
    assert evs[-1]["type"] == "error"
    err = evs[-1]["error"]
    assert err["exit_code"] == 4 and "does not exist" in err["message"]
    assert failed_attempts(evs, _zone) == [("r1/r1-a", "stop")]
    assert len(api.creates) == creates + 1  # nothing else was tried
    assert env.status("tc-stop") is None and api.live() == []


def test_credential_error_blocks_the_cloud_not_the_launch(
    env: Env, api: FakeInstancesAPI, tmp_path: Path
) -> None:
    api.fail("r1", None, "auth")
    evs = launch_events(tmp_path, "tc-cred", HELLO)
    assert evs[-1]["type"] == "result", evs[-3:]
    assert failed_attempts(evs, _zone) == [("r1/r1-a", "cloud")]
    row = env.status("tc-cred")
    assert row is not None and row["cloud"] == "fakecloud"
    with Client(autostart=False) as c:
        cached = {r["infra"]: r for r in c.get("/v1/check", {"cached": "1"})}
        assert cached["testcloud"]["launch"] is False
        assert "refused the API key" in cached["testcloud"]["reason"]
        api.clear_failures()
        fresh = {r["infra"]: r for r in c.get("/v1/check")}  # `skyd check` probes again
        assert fresh["testcloud"]["launch"] is True
        assert fresh["testcloud"]["checked_at"] > cached["testcloud"]["checked_at"]
    _down(env, api, "tc-cred")


def test_a_hung_create_hits_the_deadline_and_fails_over(
    env: Env, api: FakeInstancesAPI, tmp_path: Path
) -> None:
    api.fail("r1", "r1-a", "hang")
    evs = launch_events(tmp_path, "tc-hang", HELLO)
    assert evs[-1]["type"] == "result", evs[-3:]
    assert failed_attempts(evs, _zone) == [("r1/r1-a", "zone")]
    assert any("did not finish within 3s" in e.get("error", "") for e in evs)
    row = env.status("tc-hang")
    assert row is not None and (row["cloud"], row["zone"]) == ("testcloud", "r1-b")
    tag = cluster_row(env.home, "tc-hang")["tag"]  # type: ignore[index]
    assert {i["zone"] for i in api.live()} == {"r1-b"} and len(api.live(tag)) == 1
    _down(env, api, "tc-hang")
    assert api.live() == []


def test_ports_disk_image_labels_reach_the_provider_and_unsupported_is_refused(
    env: Env, api: FakeInstancesAPI, tmp_path: Path
) -> None:
    task = ("resources:\n  ports: 8080\n  disk_size: 64\n  image_id: img-7\n"
            "  labels: {team: ml}\nrun: echo hi\n")
    evs = launch_events(tmp_path, "tc-feat", task)
    assert evs[-1]["type"] == "result", evs[-3:]
    body = api.creates[-1]
    assert (body["ports"], body["disk_size"], body["image_id"]) == (["8080"], 64, "img-7")
    assert body["labels"]["team"] == "ml"
    _down(env, api, "tc-feat")
    r = env_fail(tmp_path, "resources:\n  infra: local\n  image_id: img-7\nrun: echo hi\n")
    assert r.returncode == 2, r.stderr
    assert "resources.image_id: image_id is not supported on the 'local' infra" in r.stderr
    assert "infras that support it:" in r.stderr and "aws" in r.stderr  # named in the hint


def env_fail(tmp_path: Path, task: str) -> Any:
    from tests.support.daemon import cli

    y = write(tmp_path / "bad.yaml", task)
    return cli("launch", "-c", "tc-bad", "-y", str(y))


@pytest.mark.parametrize("point", POINTS)
def test_kill9_mid_provision_then_restart_leaves_nothing(
    env: Env, api: FakeInstancesAPI, tmp_path: Path, point: str
) -> None:
    name = f"tc-k9-{point.replace('_', '-')}"
    api.pause_at(point)
    rid = submit_launch(tmp_path, name, HELLO)
    assert api.reached.wait(30), f"the launch never reached {point}"
    body = api.creates[-1]
    # The partial handle was in SQLite before the create call arrived.
    row = cluster_row(env.home, name)
    assert row is not None and row["handle"] is None and row["status"] == "INIT"
    assert (row["cloud"], row["region"], row["zone"], row["tag"]) == (
        "testcloud", body["region"], body["zone"], body["tag"])
    env.kill9_daemon()
    api.release()  # the API finishes what it was asked (the client is gone)
    first = {i["id"] for i in api.live(body["tag"])} if point != "before_create" else set()
    env.start_daemon()
    evs = request_events(rid)
    assert evs[-1]["type"] == "result", evs[-3:]
    row = cluster_row(env.home, name)
    assert row is not None and row["status"] == "UP"
    handle = json.loads(row["handle"])
    now = {i["id"] for i in api.live()}
    assert now == {n["instance_id"] for n in handle["nodes"]}  # only the cluster's own nodes
    assert not first & now and first <= set(api.terminated)
    assert "hello-tc" in env.ok("logs", name, "1", "--no-follow").stdout
    _down(env, api, name)
    assert api.live() == []


def test_the_last_error_lists_every_attempt_and_why(
    env: Env, api: FakeInstancesAPI, tmp_path: Path
) -> None:
    from tests.fakes.preemptible import write_knobs

    for region in ("r1", "r2", "r3"):
        api.fail(region, None, "capacity")
    write_knobs(refused=[[None, None]])  # and the fake preemptible cloud has nothing either
    try:
        evs = launch_events(tmp_path, "tc-none", HELLO)
    finally:
        write_knobs()
    assert evs[-1]["type"] == "error", evs[-3:]
    msg = evs[-1]["error"]["message"]
    tried = [line for line in msg.splitlines() if line.startswith("  - ")]
    assert len(tried) == len(failed_attempts(evs, _zone)) == 6 + 3  # six testcloud zones, three fakecloud regions
    assert "  - testcloud/r1/r1-a tc-small" in msg and "[zone] testcloud/r1/r1-a: no capacity" in msg
    assert "[region] fakecloud/r1/" in msg and "insufficient capacity" in msg
    assert env.status("tc-none") is None and api.live() == []
