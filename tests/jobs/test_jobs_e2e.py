"""Managed jobs end to end: a real daemon, the real pipeline, real node agents on the fake
preemptible provider (`fakecloud`: regions r1 < r2 < r3 in price, zones a/b). One daemon
serves the module; each test looks at its own job, and what it leaves is taken down after it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.fakes import preemptible
from tests.support.daemon import cli, wait_for
from tests.support.pipeline import Env

SPOT = "resources:\n  infra: fakecloud\n  use_spot: true\n"


@pytest.fixture
def skyd_home(shared: Env) -> Path:
    return shared.home


SHARED_DAEMON_ENV: dict[str, str] = {
    "SKYD_EXTRA_PLUGINS": "tests.fakes.preemptible",
    "SKYD_JOBS_POLL": "0.3",
    "SKYD_JOBS_BACKOFF": "0.3",
}  # the tests taking `daemon` share one (tests/support/plugin.py)


def _job(jid: int) -> dict[str, Any]:
    from skyd import sdk

    return dict(sdk.get(f"/v1/jobs/{jid}"))


def _launch(tmp_path: Path, body: str, name: str = "mj") -> int:
    f = tmp_path / f"{name}.yaml"
    f.write_text(f"name: {name}\n{body}")
    r = cli("jobs", "launch", "-d", "-o", "json", str(f))
    assert r.returncode == 0, r.stderr
    import json

    return int(json.loads(r.stdout)["job_id"])


def _watch(jid: int, until: set[str], timeout: float = 60.0) -> list[str]:
    """Statuses seen (deduplicated, in order) until one in `until`."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = _job(jid)["status"]
        if not seen or seen[-1] != s:
            seen.append(s)
        if s in until:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"job {jid} stuck; statuses seen: {seen}")


def _no_clusters_left(home: Path) -> None:
    from skyd import sdk

    wait_for(lambda: sdk.get("/v1/status") == [], timeout=20)
    left = [p for p in (home / "local").glob("skyd-jobs-*")] if (home / "local").exists() else []
    assert left == []


def test_preempted_spot_job_recovers_in_another_region(daemon: Any, skyd_home: Path, tmp_path: Path) -> None:
    jid = _launch(tmp_path, SPOT + "run: |\n  for i in $(seq 1 30); do echo tick $i; sleep 0.1; done\n"
                  "  echo job $SKYPILOT_MANAGED_JOB_ID task $SKYPILOT_TASK_ID\n")
    _watch(jid, {"RUNNING"})
    first = _job(jid)
    assert first["last_region"] == "r1"  # the cheapest
    killed = anyio.run(preemptible.PreemptibleProvisioner().preempt, first["cluster"])
    assert killed > 0
    seen = _watch(jid, {"SUCCEEDED", "FAILED", "FAILED_NO_RESOURCE", "CANCELLED"})
    assert "RECOVERING" in seen and seen[-1] == "SUCCEEDED", seen
    done = _job(jid)
    assert done["recoveries"] == 1
    assert done["last_region"] != "r1"  # EAGER_NEXT_REGION blocked the preempted region
    # The task id is stable across the recovery (user code resumes from checkpoints).
    r = cli("jobs", "logs", str(jid), "--no-follow")
    assert r.returncode == 0
    assert f"job {jid} task sky-managed" in r.stdout
    _no_clusters_left(skyd_home)


def test_user_failure_restarts_then_succeeds(daemon: Any, skyd_home: Path, tmp_path: Path) -> None:
    mark = tmp_path / "ran-once"
    body = (SPOT + "  job_recovery:\n    max_restarts_on_errors: 1\n"
            f"run: |\n  if [ -f {mark} ]; then echo second; exit 0; fi\n  touch {mark}; exit 3\n")
    jid = _launch(tmp_path, body, "flaky")
    seen = _watch(jid, {"SUCCEEDED", "FAILED"})
    assert seen[-1] == "SUCCEEDED", seen
    assert _job(jid)["restarts"] == 1 and _job(jid)["recoveries"] == 0


def test_user_failure_without_restarts_fails_with_exit_code(daemon: Any, tmp_path: Path) -> None:
    jid = _launch(tmp_path, SPOT + "run: exit 7\n", "bad")
    seen = _watch(jid, {"SUCCEEDED", "FAILED"})
    assert seen[-1] == "FAILED"
    assert _job(jid)["exit_code"] == 7


def test_no_capacity_anywhere_is_failed_no_resource(daemon: Any, skyd_home: Path, tmp_path: Path) -> None:
    preemptible.write_knobs(refused=[[r, None] for r in preemptible.REGIONS])
    try:
        jid = _launch(tmp_path, SPOT + "run: echo never\n", "nocap")
        seen = _watch(jid, {"FAILED_NO_RESOURCE", "SUCCEEDED", "FAILED"})
        assert seen[-1] == "FAILED_NO_RESOURCE", seen
    finally:
        preemptible.write_knobs()
    _no_clusters_left(skyd_home)


def test_cancel_running_job_tears_its_cluster_down(daemon: Any, skyd_home: Path, tmp_path: Path) -> None:
    jid = _launch(tmp_path, SPOT + "run: sleep 60\n", "long")
    _watch(jid, {"RUNNING"})
    r = cli("jobs", "cancel", str(jid))
    assert r.returncode == 0, r.stderr
    seen = _watch(jid, {"CANCELLED"})
    assert seen[-1] == "CANCELLED"
    _no_clusters_left(skyd_home)


def test_pipeline_runs_tasks_in_order_each_on_its_own_cluster(daemon: Any, skyd_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "order.txt"
    f = tmp_path / "pipe.yaml"
    f.write_text(
        "name: pipe\n---\n"
        f"name: prep\n{SPOT}run: echo prep >> {out}\n---\n"
        f"name: train\n{SPOT}run: echo train >> {out}; echo task $SKYPILOT_TASK_ID\n"
    )
    r = cli("jobs", "launch", "-d", "-o", "json", str(f))
    assert r.returncode == 0, r.stderr
    import json

    jid = int(json.loads(r.stdout)["job_id"])
    seen = _watch(jid, {"SUCCEEDED", "FAILED", "FAILED_NO_RESOURCE"})
    assert seen[-1] == "SUCCEEDED", seen
    assert out.read_text().split() == ["prep", "train"]
    assert _job(jid)["current_task"] == 1
    _no_clusters_left(skyd_home)


def test_jobs_launch_plans_with_the_callers_catalog_dir(daemon: Any, skyd_home: Path,
                                                        tmp_path: Path) -> None:
    """The daemon runs without SKYD_CATALOG_DIR; the shell that submits has it. A folder
    that is not there is refused at submit (exit 2, nothing made); a real one is kept
    with the job so its launch and every recovery plan over the same catalogs."""
    import json
    import os
    import sqlite3

    with sqlite3.connect(skyd_home / "state.db", timeout=30) as con:
        (before,) = con.execute("SELECT COALESCE(MAX(id), 0) FROM managed_jobs").fetchone()
    f = tmp_path / "cat-job.yaml"
    f.write_text("name: cat-job\nrun: echo hi\n")
    r = cli("jobs", "launch", "-d", "-o", "json", str(f),
            env={"SKYD_CATALOG_DIR": str(tmp_path / "nope")})
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "SKYD_CATALOG_DIR" in r.stdout + r.stderr and "Traceback" not in r.stderr
    cat = tmp_path / "mine"
    cat.mkdir()
    (cat / "runpod.csv").write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Region,"
        "AvailabilityZone,Price,SpotPrice\ncpu-tiny,,,2,8,,CA,CA-MTL-1,0.01,\n")
    assert "SKYD_CATALOG_DIR" not in os.environ
    r = cli("jobs", "launch", "-d", "-o", "json", str(f), env={"SKYD_CATALOG_DIR": str(cat)})
    assert r.returncode == 0, r.stderr
    jid = int(json.loads(r.stdout)["job_id"])
    con = sqlite3.connect(skyd_home / "state.db", timeout=30)
    try:
        dags = [json.loads(d) for (d,) in con.execute(
            "SELECT dag FROM managed_jobs WHERE id > ?", (before,))]  # this test's jobs
    finally:
        con.close()
    assert [d.get("catalog_dir") for d in dags] == [str(cat)], dags
    assert _watch(jid, {"SUCCEEDED", "FAILED", "FAILED_NO_RESOURCE"})[-1] == "SUCCEEDED"
    _no_clusters_left(skyd_home)
