"""The neocloud providers end to end: a real daemon (network guard on: nothing outside
127.0.0.0/8 is reached), the real CLI, each provider's fake API with machines that are fake
SSH hosts on 127.0.0.x running real node agents. launch -> exec -> down per provider, AMD
jobs seeing HIP_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES, `show-gpus MI300X`, and failover
across providers (the cheapest out of capacity, a wrong key skipped with the reason); after
every failure nothing is left on any fake."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.runpod import FakeRunPod
from tests.fakes.vultr import FakeVultr
from tests.test_gcp_support import GEnv, guarded_module_env
from tests.test_neocloud_support import runpod_env, vultr_env
from tests.test_pipeline_support import write

MI8 = ("resources:\n  infra: {infra}\n  accelerators: MI300X:8\n"
       "run: echo amd-$SKYPILOT_NODE_RANK hip=$HIP_VISIBLE_DEVICES rocr=$ROCR_VISIBLE_DEVICES\n")


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("neo")
    fs: dict[str, Any] = {"runpod": FakeRunPod(root, first_ip=140).start(),
                          "vultr": FakeVultr(root, first_ip=170).start()}
    try:
        yield fs
    finally:
        left = {n: f.live() for n, f in fs.items() if f.live()}
        for f in fs.values():
            f.stop()
    assert not left, f"machines left on the fakes: {left}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, fakes: dict[str, Any]) -> Iterator[GEnv]:
    base = tmp_path_factory.mktemp("neoenv")
    vars_ = runpod_env(fakes["runpod"]) | vultr_env(fakes["vultr"]) | {
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


@pytest.mark.parametrize("infra", ["runpod", "vultr"])
def test_launch_exec_down_on_each_provider(env: GEnv, fakes: dict[str, Any], tmp_path: Path,
                                           infra: str) -> None:
    name = f"e-{infra}"
    y = write(tmp_path / "t.yaml", MI8.format(infra=infra))
    r = env.ok("launch", "-y", "-c", name, str(y), timeout=180)
    assert "amd-0 hip=0,1,2,3,4,5,6,7 rocr=0,1,2,3,4,5,6,7" in r.stdout, r.stdout
    row = env.status(name)
    assert row is not None and row["status"] == "UP" and row["cloud"] == infra
    assert all(ip.startswith("127.0.0.") for ip in fakes[infra].handed_out)
    r = env.ok("exec", name, "echo exec-on-$SKYPILOT_NODE_RANK")
    assert "exec-on-0" in r.stdout
    env.ok("down", name, "-y")
    _nothing_left(fakes)
