"""CLI behaviour SkyPilot users expect: `skyd check`, the launch confirmation, exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import SKYD_BIN, cli, running_daemon

SHARED_DAEMON_ENV: dict[str, str] = {}  # the tests taking `daemon` share one (tests/support/plugin.py)


def test_check_lists_launchable_and_catalog_only_infras(daemon: Any) -> None:
    r = cli("check", "-o", "json")
    assert r.returncode == 0, r.stderr
    rows = {row["infra"]: row for row in json.loads(r.stdout)}
    assert rows["local"]["launch"] and rows["local"]["plan"]
    assert not rows["azure"]["launch"] and "catalog only" in rows["azure"]["reason"]
    assert not rows["aws"]["launch"]  # a provider, but no credentials (tests: loopback only)
    assert not rows["ssh"]["launch"] and "ssh_node_pools.yaml" in rows["ssh"]["reason"]
    assert "vultr" in rows  # AMD MI-series providers are listed beside the rest


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux `script` for a TTY")
def test_launch_asks_before_making_a_new_cluster(daemon: Any) -> None:
    def launch(answer: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["script", "-qec", f"{SKYD_BIN} launch -c asked 'echo launched-ok'", "/dev/null"],
            input=answer, capture_output=True, text=True, timeout=120,
        )

    no = launch("n\n")
    assert "Launching a new cluster 'asked'. Proceed? [Y/n]" in no.stdout
    assert "Aborted." in no.stdout and no.returncode != 0
    assert json.loads(cli("status", "-o", "json").stdout) == []  # nothing was made
    yes = launch("y\n")
    assert yes.returncode == 0 and "launched-ok" in yes.stdout
    # Reusing an existing cluster does not ask; neither does -y (used everywhere else).
    again = launch("")
    assert "Proceed?" not in again.stdout and "launched-ok" in again.stdout


def test_failed_job_makes_launch_exit_nonzero(daemon: Any) -> None:
    r = cli("launch", "-y", "-c", "failing", "echo before; exit 4")
    assert r.returncode == 1
    assert "before" in r.stdout and "FAILED (exit code 4)" in r.stderr


def test_dryrun_of_a_pipeline_plans_the_chain_with_egress(skyd_home: Path, tmp_path: Path) -> None:
    import skyd.clouds

    cat = tmp_path / "catalogs"
    cat.mkdir()
    data = Path(skyd.clouds.__file__).parent / "data"
    for c in ("aws", "runpod"):
        shutil.copy(data / f"{c}.csv", cat / f"{c}.csv")
    f = tmp_path / "chain.yaml"
    f.write_text(
        "name: pipeline\n---\n"
        "name: prep\nresources:\n  cpus: 8+\noutputs:\n  s3://b/clean: 50\nrun: x\n---\n"
        "name: train\nresources:\n  accelerators: {A100:8, H100:8}\nrun: y\n"
    )
    with running_daemon(SKYD_CATALOG_DIR=str(cat)):
        r = cli("launch", "--dryrun", "-o", "json", str(f))
        assert r.returncode == 0, r.stderr
        plan = json.loads(r.stdout)
        assert [t["name"] for t in plan["tasks"]] == ["prep", "train"]
        prep, train = (t["chosen"] for t in plan["tasks"])
        assert train["accelerators"] in ({"A100": 8}, {"H100": 8})
        # 50 GB leave prep's location for train's: co-located costs no egress, else the
        # estimate carries it.
        if (prep["cloud"], prep["region"]) == (train["cloud"], train["region"]):
            assert plan["estimated_cost"] == pytest.approx(plan["total_hourly_cost"])
        else:
            assert plan["estimated_cost"] > plan["total_hourly_cost"]
        table = cli("launch", "--dryrun", str(f))
        assert "Considered resources for task 'prep'" in table.stdout
        assert "Considered resources for task 'train'" in table.stdout
        # Nothing was launched.
        assert json.loads(cli("status", "-o", "json").stdout) == []


def test_cost_report_bills_only_while_not_stopped(skyd_home: Path, tmp_path: Path) -> None:
    import time

    f = tmp_path / "t.yaml"
    f.write_text("resources:\n  infra: fakecloud\n  cpus: 2\nrun: echo up\n")
    with running_daemon(SKYD_EXTRA_PLUGINS="tests.fakes.preemptible"):
        t_launch = time.monotonic()
        assert cli("launch", "-y", "-c", "billed", str(f)).returncode == 0
        time.sleep(1.0)
        assert cli("stop", "billed").returncode == 0
        up_at_most = time.monotonic() - t_launch  # however long the calls took on this load
        time.sleep(3.0)  # stopped: free
        report = json.loads(cli("cost-report", "-o", "json").stdout)
        live = next(c for c in report["clusters"] if c["name"] == "billed")
        assert live["status"] == "STOPPED" and live["hourly_cost"] > 0
        assert 1.0 <= live["duration_s"] <= up_at_most  # the 3 s stopped are not billed
        assert cli("down", "-y", "billed").returncode == 0
        report = json.loads(cli("cost-report", "-o", "json").stdout)
        gone = next(c for c in report["clusters"] if c["name"] == "billed")
        assert gone["status"] == "TERMINATED" and 1.0 <= gone["duration_s"] <= up_at_most
        assert gone["cost"] == pytest.approx(gone["hourly_cost"] * gone["duration_s"] / 3600)
