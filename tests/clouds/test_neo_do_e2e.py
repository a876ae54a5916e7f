"""`skyd launch accelerators: MI300X:8` on DigitalOcean / AMD Developer Cloud end to end:
a real daemon (network guard on), the real CLI, two fake DO-shaped APIs whose droplets are
fake SSH hosts on 127.0.0.x running real node agents. The cheapest provider out of capacity
fails over to the other; a wrong key is skipped with the reason; nothing is left after."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.doapi import AMD_SIZES, FakeDO
from tests.fakes.vmapi import free_port
from tests.support.gcp import GEnv, guarded_module_env
from tests.support.launches import events_text, failed_attempts, launch_events, nothing_left_on
from tests.support.neo import do_environ, write_catalog
from tests.support.pipeline import write

TASK = "resources:\n  accelerators: MI300X:8\nrun: echo hello-from-mi300x $SKYPILOT_NODE_RANK\n"


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeDO, FakeDO]]:
    port = free_port()
    do = FakeDO(tmp_path_factory.mktemp("do"), first_ip=150, ssh_port=port, regions=("nyc1",)).start()
    amd = FakeDO(tmp_path_factory.mktemp("amd"), first_ip=170, ssh_port=port, token="amd-fake",
                 regions=("atl1",), sizes=AMD_SIZES).start()
    with nothing_left_on(do, amd):
        yield do, amd  # type: ignore[misc]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, fakes: tuple[FakeDO, FakeDO]) -> Iterator[GEnv]:
    do, amd = fakes
    base = tmp_path_factory.mktemp("doenv")
    env_vars = do_environ(do, amd, base) | {
        "SKYD_CATALOG_DIR": str(write_catalog(base / "catalog")),
        "SKYD_PROVISION_TIMEOUT_S": "60",
    }
    with guarded_module_env(tmp_path_factory, base / "netguard.log", env_vars) as e:
        yield e


@pytest.fixture(autouse=True)
def fresh(fakes: tuple[FakeDO, FakeDO]) -> Iterator[None]:
    do, amd = fakes
    for f in fakes:
        f.clear()
    tokens = do.token, amd.token
    yield
    for f in fakes:
        f.clear()
    do.token, amd.token = tokens


def test_launch_exec_down_on_the_cheapest_mi300x8(env: GEnv, fakes: tuple[FakeDO, FakeDO],
                                                   tmp_path: Path) -> None:
    do, amd = fakes
    y = write(tmp_path / "t.yaml", TASK)
    r = env.ok("launch", "-y", "-c", "m1", str(y), timeout=180)
    assert "hello-from-mi300x 0" in r.stdout, r.stdout
    row = env.status("m1")
    assert row is not None and row["status"] == "UP" and row["cloud"] == "do", row
    (d,) = do.live()
    assert d["size_slug"] == "gpu-mi300x8-1536gb" and d["image"]["slug"] == "gpu-amd-base"
    assert all(ip.startswith("127.0.0.") for ip in do.handed_out)
    assert "exec-on-do" in env.ok("exec", "m1", "echo exec-on-do").stdout
    env.ok("down", "m1", "-y")
    assert do.live() == [] and amd.live() == []


def test_out_of_capacity_fails_over_to_amd_developer_cloud(env: GEnv, fakes: tuple[FakeDO, FakeDO],
                                                           tmp_path: Path) -> None:
    do, amd = fakes
    do.no_capacity()
    evs = launch_events(tmp_path, "m2", TASK)
    assert evs[-1]["type"] == "result", evs[-3:]
    assert failed_attempts(evs) == [("do/nyc1", "region")]
    assert "out of stock" in events_text(evs)
    row = env.status("m2")
    assert row is not None and row["cloud"] == "amddevcloud" and row["status"] == "UP", row
    assert do.live() == [] and len(amd.live()) == 1  # the failed attempt left nothing
    env.ok("down", "m2", "-y")
    assert amd.live() == []


def test_a_wrong_key_is_skipped_with_the_reason(env: GEnv, fakes: tuple[FakeDO, FakeDO],
                                                tmp_path: Path) -> None:
    do, amd = fakes
    env.ok("check")  # both enabled and cached
    do.token = "dop_v1_rotated"  # the key the daemon holds is now wrong
    evs = launch_events(tmp_path, "m3", TASK)
    assert evs[-1]["type"] == "result", evs[-3:]
    text = events_text(evs)
    assert "DigitalOcean refused the token from $DIGITALOCEAN_TOKEN" in text, text
    row = env.status("m3")
    assert row is not None and row["cloud"] == "amddevcloud", row
    env.ok("down", "m3", "-y")
    assert do.live() == [] and amd.live() == []


def test_no_capacity_anywhere_fails_clearly_and_leaves_nothing(env: GEnv, fakes: tuple[FakeDO, FakeDO],
                                                               tmp_path: Path) -> None:
    do, amd = fakes
    env.ok("check")  # the key refused in an earlier test works again
    do.no_capacity()
    amd.no_capacity()
    y = write(tmp_path / "none.yaml", TASK)
    from tests.support.pipeline import cli

    r = cli("launch", "-y", "-c", "m4", str(y), timeout=120)
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    assert "no capacity" in r.stderr and "out of stock" in r.stderr, r.stderr
    assert "do/nyc1" in r.stderr and "amddevcloud/atl1" in r.stderr, r.stderr
    assert do.live() == [] and amd.live() == [] and env.status("m4") is None
