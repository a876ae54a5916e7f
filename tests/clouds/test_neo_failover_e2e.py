"""`accelerators: MI300X:8` across DigitalOcean, AMD Developer Cloud and Crusoe through a
real daemon (network guard on) and the real CLI, against the three fakes: the cheapest
provider out of capacity lands on the next cheapest, a provider whose key is wrong is
skipped with the reason, MI355X:8 launches on Crusoe and runs a job, and after every
failure nothing is left on any fake."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.crusoeapi import FakeCrusoe
from tests.fakes.doapi import AMD_SIZES, FakeDO
from tests.fakes.vmapi import free_port
from tests.support.gcp import GEnv, guarded_module_env
from tests.support.launches import (
    cluster_row,
    failed_attempts,
    launch_events,
    nothing_left_on,
    request_events,
    submit_launch,
)
from tests.support.neo import crusoe_environ, do_environ, write_catalog
from tests.support.pipeline import write

TASK = "resources:\n  accelerators: MI300X:8\nrun: echo hello-from-mi300x\n"


class Fakes:
    def __init__(self, root: Path) -> None:
        port = free_port()
        self.do = FakeDO(root / "do", first_ip=150, ssh_port=port, regions=("nyc1",)).start()
        self.amd = FakeDO(root / "amd", first_ip=170, ssh_port=port, token="amd-fake", regions=("atl1",),
                          sizes=AMD_SIZES).start()
        self.cr = FakeCrusoe(root / "crusoe", first_ip=190).start()
        self.tokens = (self.do.token, self.amd.token, self.cr.secret_key)

    def clear(self) -> None:
        for f in (self.do, self.amd, self.cr):
            f.clear()
        self.do.token, self.amd.token, self.cr.secret_key = self.tokens

    def live(self) -> list[Any]:
        return self.do.live() + self.amd.live() + self.cr.live()

    def stop(self) -> None:
        for f in (self.do, self.amd, self.cr):
            f.stop()


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fakes]:
    f = Fakes(tmp_path_factory.mktemp("neo"))
    with nothing_left_on(f):
        yield f


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, fakes: Fakes) -> Iterator[GEnv]:
    base = tmp_path_factory.mktemp("neoenv")
    env_vars = do_environ(fakes.do, fakes.amd, base) | crusoe_environ(fakes.cr, base) | {
        "SKYD_CATALOG_DIR": str(write_catalog(base / "catalog", crusoe=True)),
        "SKYD_PROVISION_TIMEOUT_S": "60",
    }
    with guarded_module_env(tmp_path_factory, base / "netguard.log", env_vars) as e:
        yield e


@pytest.fixture(autouse=True)
def fresh(fakes: Fakes) -> Iterator[None]:
    fakes.clear()
    yield
    fakes.clear()


def _launch(tmp_path: Path, name: str, task: str = TASK) -> list[dict[str, Any]]:
    evs = launch_events(tmp_path, name, task)
    assert evs[-1]["type"] == "result", evs[-3:]
    return evs


def test_check_names_every_provider_enabled(env: GEnv) -> None:
    rows = {x["infra"]: x for x in json.loads(env.ok("check", "-o", "json").stdout)}
    for name, said in (("do", "$DIGITALOCEAN_TOKEN"), ("amddevcloud", "$AMD_DEVELOPER_CLOUD_TOKEN"),
                       ("crusoe", "$CRUSOE_ACCESS_KEY_ID")):
        assert rows[name]["launch"] is True and said in json.dumps(rows[name]), rows[name]


def test_catalog_refresh_from_the_cli_for_each_provider(env: GEnv) -> None:
    for name in ("do", "amddevcloud", "crusoe"):
        r = env.ok("catalog", "refresh", name)
        assert f"{name}: wrote " in r.stdout and "catalogs" in r.stdout, r.stdout


def test_both_droplet_clouds_out_of_capacity_lands_on_crusoe(env: GEnv, fakes: Fakes, tmp_path: Path) -> None:
    fakes.do.no_capacity()
    fakes.amd.no_capacity()
    evs = _launch(tmp_path, "f1")
    assert failed_attempts(evs) == [("do/nyc1", "region"), ("amddevcloud/atl1", "region")]
    row = env.status("f1")
    assert row is not None and row["cloud"] == "crusoe" and row["status"] == "UP", row
    assert fakes.do.live() == [] and fakes.amd.live() == [] and len(fakes.cr.live()) == 1
    assert "hello-from-mi300x" in env.ok("logs", "f1", "1", "--no-follow").stdout
    env.ok("down", "f1", "-y")
    assert fakes.live() == []


def test_wrong_crusoe_key_and_a_full_do_land_on_amd_developer_cloud(env: GEnv, fakes: Fakes,
                                                                    tmp_path: Path) -> None:
    fakes.do.no_capacity()
    fakes.amd.no_capacity()
    fakes.cr.secret_key = "cm90YXRlZC1zZWNyZXQ"  # the daemon's secret no longer signs right
    y = write(tmp_path / "f2.yaml", TASK)
    from tests.support.pipeline import cli

    r = cli("launch", "-y", "-c", "f2", str(y), timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "Crusoe refused the keys" in r.stderr and "signature does not match" in r.stderr, r.stderr
    assert fakes.live() == [] and env.status("f2") is None
    fakes.amd.clear()  # AMD Developer Cloud has capacity again
    creates = len(fakes.cr.creates)
    evs = _launch(tmp_path, "f3")
    assert failed_attempts(evs) == [("do/nyc1", "region")]  # crusoe stays blocked: its check failed
    assert len(fakes.cr.creates) == creates
    row = env.status("f3")
    assert row is not None and row["cloud"] == "amddevcloud", row
    env.ok("down", "f3", "-y")
    assert fakes.live() == []


def test_mi355x8_on_crusoe_launch_exec_down(env: GEnv, fakes: Fakes, tmp_path: Path) -> None:
    env.ok("check")  # a refused key (an earlier test) stays blocked until checked again
    fakes.cr.op_s = 0.5
    y = write(tmp_path / "x.yaml", "resources:\n  accelerators: MI355X:8\nrun: echo hello-mi355x\n")
    r = env.ok("launch", "-y", "-c", "x1", str(y), timeout=180)
    assert "hello-mi355x" in r.stdout, r.stdout
    (vm,) = fakes.cr.live()
    assert vm["type"] == "mi355x-288gb.8x" and vm["image"] == "ubuntu-rocm:latest"
    assert "exec-crusoe" in env.ok("exec", "x1", "echo exec-crusoe").stdout
    env.ok("down", "x1", "-y")
    assert fakes.live() == [] and fakes.cr.bad_signatures == 0


@pytest.mark.parametrize("cloud,point", [("do", "before_running"), ("crusoe", "before_running"),
                                         ("crusoe", "in_operation")])
def test_kill9_while_a_vm_is_starting_then_restart_leaves_only_the_cluster(
    env: GEnv, fakes: Fakes, tmp_path: Path, cloud: str, point: str
) -> None:
    fake: Any = fakes.do if cloud == "do" else fakes.cr
    if cloud == "crusoe":
        fakes.do.no_capacity()
        fakes.amd.no_capacity()
    name = f"k9-{cloud}-{point.replace('_', '-')}"
    fake.pause_at(point)
    rid = submit_launch(tmp_path, name, TASK)
    assert fake.reached.wait(60), "the create never happened"
    row = cluster_row(env.home, name)
    assert row is not None and row["handle"] is None and row["cloud"] == cloud  # the partial handle
    env.kill9_daemon()
    if point == "in_operation":  # the operation finishes only after the restarted daemon looked
        env.start_daemon()
        time.sleep(1.0)
        fake.release()
    else:
        fake.release()
        env.start_daemon()
    evs = request_events(rid)
    assert evs[-1]["type"] == "result", evs[-3:]
    row = cluster_row(env.home, name)
    assert row is not None and row["status"] == "UP" and row["cloud"] == cloud, row
    handle = json.loads(row["handle"])
    assert {str(i["id"]) for i in fake.live()} == {n["instance_id"] for n in handle["nodes"]}
    assert "hello-from-mi300x" in env.ok("logs", name, "1", "--no-follow").stdout
    env.ok("down", name, "-y")
    assert not any(o["state"] == "IN_PROGRESS" for o in fakes.cr.ops.values())
    assert fakes.live() == []
