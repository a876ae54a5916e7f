"""The neocloud providers end to end: a real daemon (network guard on: nothing outside
127.0.0.0/8 is reached), the real CLI, each provider's fake API with machines that are fake
SSH hosts on 127.0.0.x running real node agents. launch -> exec -> down per provider, AMD
jobs seeing HIP_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES, `show-gpus MI300X`, and failover
across providers (the cheapest out of capacity, a wrong key skipped with the reason); after
every failure nothing is left on any fake."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.hotaisle import FakeHotAisle
from tests.fakes.runpod import FakeRunPod
from tests.fakes.vultr import FakeVultr
from tests.support.gcp import GEnv, guarded_module_env
from tests.support.launches import (
    cluster_row,
    failed_attempts,
    launch_events,
    nothing_left_on,
    request_events,
    submit_launch,
)
from tests.support.neocloud import hotaisle_env, runpod_env, vultr_env
from tests.support.pipeline import write


def _provider(target: str) -> str:
    """"runpod/US-TX-3 (...)" -> "runpod": the provider of an attempt."""
    return target.split()[0].split("/")[0]


MI8 = ("resources:\n  infra: {infra}\n  accelerators: MI300X:8\n"
       "run: echo amd-$SKYPILOT_NODE_RANK hip=$HIP_VISIBLE_DEVICES rocr=$ROCR_VISIBLE_DEVICES\n")


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("neo")
    fs: dict[str, Any] = {"runpod": FakeRunPod(root, first_ip=140).start(),
                          "vultr": FakeVultr(root, first_ip=170).start(),
                          "hotaisle": FakeHotAisle(root, first_ip=200).start()}
    with nothing_left_on(*fs.values()):
        yield fs


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, fakes: dict[str, Any]) -> Iterator[GEnv]:
    base = tmp_path_factory.mktemp("neoenv")
    vars_ = runpod_env(fakes["runpod"]) | vultr_env(fakes["vultr"]) | hotaisle_env(fakes["hotaisle"]) | {
        "SKYD_PROVISION_TIMEOUT_S": "60", "CLOUDSDK_CONFIG": str(base / "gcloud"),
        "GOOGLE_APPLICATION_CREDENTIALS": ""}
    with guarded_module_env(tmp_path_factory, base / "netguard.log", vars_) as e:
        yield e


@pytest.fixture(autouse=True)
def fresh(fakes: dict[str, Any]) -> Iterator[None]:
    for f in fakes.values():
        f.clear()
        f.release()
    yield
    for f in fakes.values():
        f.clear()
        f.release()


def _nothing_left(fakes: dict[str, Any]) -> None:
    assert {n: f.live() for n, f in fakes.items() if f.live()} == {}


@pytest.mark.parametrize(("infra", "nodes"), [("runpod", 1), ("vultr", 2), ("hotaisle", 1)])
def test_launch_exec_down_on_each_provider(env: GEnv, fakes: dict[str, Any], tmp_path: Path,
                                           infra: str, nodes: int) -> None:
    name = f"e-{infra}"
    y = write(tmp_path / "t.yaml", MI8.format(infra=infra) + f"num_nodes: {nodes}\n")
    r = env.ok("launch", "-y", "-c", name, str(y), timeout=180)
    for rank in range(nodes):
        assert f"amd-{rank} hip=0,1,2,3,4,5,6,7 rocr=0,1,2,3,4,5,6,7" in r.stdout, r.stdout
    row = env.status(name)
    assert row is not None and row["status"] == "UP" and row["cloud"] == infra
    assert all(ip.startswith("127.0.0.") for ip in fakes[infra].handed_out)
    r = env.ok("exec", name, "echo exec-on-$SKYPILOT_NODE_RANK")
    assert "exec-on-0" in r.stdout
    # `status --ip` and `ssh NAME` through skyd's generated SSH config (OpenSSH client)
    ip = env.ok("status", "--ip", name).stdout.strip()
    assert ip in fakes[infra].handed_out
    entry = env.home / "ssh-config" / name
    assert f"Host {name}\n  HostName {ip}\n" in entry.read_text()
    import shutil
    import subprocess

    if shutil.which("ssh"):
        got = subprocess.run(["ssh", "-F", str(entry), "-o", "BatchMode=yes", name, "echo via-openssh"],
                             capture_output=True, text=True, timeout=60)
        assert got.returncode == 0 and "via-openssh" in got.stdout, got.stderr
    env.ok("down", name, "-y")
    assert not entry.exists()
    _nothing_left(fakes)


ANY_MI8 = "resources:\n  accelerators: MI300X:8\nrun: echo landed\n"


def test_mi300x_8_fails_over_from_the_cheapest_out_of_capacity_to_the_next(
    env: GEnv, fakes: dict[str, Any], tmp_path: Path
) -> None:
    fakes["hotaisle"].no_capacity.add("*")  # hotaisle $15.92/h is the cheapest 8x MI300X
    evs = launch_events(tmp_path, "fo1", ANY_MI8)
    assert evs[-1]["type"] == "result", evs[-3:]
    assert failed_attempts(evs, _provider) == [("hotaisle", "region")], failed_attempts(evs, _provider)
    row = env.status("fo1")
    assert row is not None and row["status"] == "UP" and row["cloud"] == "vultr", row  # $17.52/h
    assert fakes["hotaisle"].live() == [] and len(fakes["vultr"].live()) == 1
    env.ok("down", "fo1", "-y")
    _nothing_left(fakes)


def test_a_provider_with_a_wrong_key_is_skipped_with_the_reason(
    env: GEnv, fakes: dict[str, Any], tmp_path: Path
) -> None:
    fakes["hotaisle"].no_capacity.add("*")
    good = set(fakes["vultr"].keys)
    fakes["vultr"].keys = {"rotated-key"}  # the key skyd has is no longer valid
    try:
        evs = launch_events(tmp_path, "fo2", ANY_MI8)
        assert evs[-1]["type"] == "result", evs[-3:]
        failed = failed_attempts(evs, _provider)
        assert failed[:2] == [("hotaisle", "region"), ("vultr", "cloud")], failed
        text = " ".join(str(e.get("error") or "") + str(e.get("text") or "") for e in evs)
        assert "Vultr refused the API key" in text and "VULTR_API_KEY" in text, text
        row = env.status("fo2")
        assert row is not None and row["cloud"] == "runpod", row  # $19.92/h, the next one
        _only(fakes, "runpod")
        env.ok("down", "fo2", "-y")
        _nothing_left(fakes)
        rows = {x["infra"]: x for x in json.loads(env.ok("check", "-o", "json").stdout)}
        assert rows["vultr"]["launch"] is False and "VULTR_API_KEY" in json.dumps(rows["vultr"])
    finally:
        fakes["vultr"].keys = good
    env.ok("check")


def test_every_candidate_failing_leaves_nothing_anywhere(env: GEnv, fakes: dict[str, Any],
                                                         tmp_path: Path) -> None:
    for f in fakes.values():
        f.no_capacity.add("*")
    evs = launch_events(tmp_path, "fo3", ANY_MI8)
    assert evs[-1]["type"] == "error", evs[-3:]
    assert {c for c, _ in failed_attempts(evs, _provider)} == {"hotaisle", "vultr", "runpod"}
    _nothing_left(fakes)
    assert env.status("fo3") is None


def test_show_gpus_mi300x_lists_every_provider(env: GEnv) -> None:
    out = env.ok("show-gpus", "MI300X:8").stdout
    for c in ("hotaisle", "vultr", "runpod"):
        assert c in out, out
    assert "$/GPU-h" in out and "Catalog age" in out, out
    assert "$ 1.99" in out and "$ 2.19" in out and "$ 2.49" in out, out  # per GPU-hour


def _only(fakes: dict[str, Any], name: str) -> None:
    assert {n for n, f in fakes.items() if f.live()} == {name}


def test_dryrun_plan_shows_the_minimum_reservation_charge(env: GEnv, tmp_path: Path) -> None:
    y = write(tmp_path / "dry.yaml", ANY_MI8)
    out = env.ok("launch", "--dryrun", str(y)).stdout
    assert "hotaisle" in out and "Minimum charge: hotaisle bills at least 60 min per machine: $ 15.92" in out, out


@pytest.mark.parametrize("infra", ["runpod", "vultr", "hotaisle"])
def test_kill9_while_the_create_is_unanswered_then_restart_leaves_nothing(
    env: GEnv, fakes: dict[str, Any], tmp_path: Path, infra: str
) -> None:
    """The machine exists on the provider but its create never answered the daemon: after
    `kill -9` and a restart, the resumed launch finds it (by name, or Hot Aisle's intent
    record), and `down` leaves nothing on any fake."""
    name = f"k9-{infra}"
    f = fakes[infra]
    f.pause_at("after_create")
    rid = submit_launch(tmp_path, name, MI8.format(infra=infra))
    assert f.reached.wait(60), "the launch never reached the create"
    assert len(f.live()) == 1
    env.kill9_daemon()
    f.release()
    env.start_daemon()
    evs = request_events(rid)
    assert evs[-1]["type"] == "result", evs[-3:]
    row = cluster_row(env.home, name)
    assert row is not None and row["status"] == "UP" and row["handle"]
    handle = json.loads(row["handle"])
    assert {m.get("id") or m.get("name") for m in f.live()} == {n["instance_id"] for n in handle["nodes"]}
    env.ok("down", name, "-y")
    _nothing_left(fakes)
