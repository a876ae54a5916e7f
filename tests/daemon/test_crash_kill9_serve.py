"""kill -9 of the daemon during `serve up`, `serve update` (rolling and blue/green), `serve
down`, replica replacement, `jobs pool apply`/resize/`down`, `down -a` of several clusters, 2-node
gang launches on the fake preemptible cloud and a gang job whose agents were killed, at
seeded moments: every object ends where it would have, nothing is left (harness:
tests/support/crash_harness.py, scenarios in tests/support/crash_scenarios_local.py).
``SKYD_CRASH_TRIALS=N`` adds N seeds of each scenario (marked slow)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from skyd.sdk.transport import Client
from tests.daemon.test_crash_kill9 import many_seeds
from tests.support.crash_harness import run_trial
from tests.support.daemon import DaemonProc, cli, wait_for

SEEDED = [("update", 3), ("update_bg", 5), ("up", 7), ("down", 11), ("pool", 13),
          ("down_all", 17), ("gang_fake", 42), ("replica_replace", 19), ("gang_agents", 29),
          ("pool_resize", 23)]
SCENARIOS = sorted({s for s, _ in SEEDED})


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("scenario", "seed"), SEEDED)
def test_kill9_daemon_serving_and_pools(scenario: str, seed: int) -> None:
    r = run_trial(seed, scenario)
    assert r.ok, r.problems
    assert r.kills >= 1, r


@pytest.mark.slow
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("seed", many_seeds(2000))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_kill9_daemon_serving_many_trials(scenario: str, seed: int) -> None:
    r = run_trial(seed, scenario)
    assert r.ok, r.problems


def test_a_resumed_launch_adopts_the_job_its_killed_daemon_submitted(skyd_home: Path) -> None:
    """The daemon submitted the job and was killed before it recorded the job's id: the
    resumed launch finds that job on the cluster and follows it; it never submits it again.
    (The state the killed daemon left is written directly: the window is a few ms wide.)"""
    from skyd.sdk.payloads import launch_payload, task_source

    d = DaemonProc().start()
    try:
        assert cli("launch", "-y", "-c", "ad", "--infra", "local", "echo first").returncode == 0
        # what the killed daemon's launch had sent to the agent: job 2
        r = cli("launch", "-y", "-c", "ad", "--infra", "local", "echo twice")
        assert r.returncode == 0, r.stderr
    finally:
        d.terminate()
        d.cleanup()
    payload = launch_payload(task_source(command="echo twice"), cluster_name="ad")
    db = sqlite3.connect(skyd_home / "state.db")
    with db:
        db.execute("INSERT INTO requests(id, verb, status, created_at, payload, stages, "
                   "cluster_name) VALUES('0badc0de', 'launch', 'RUNNING', ?, ?, '[]', 'ad')",
                   (time.time(), json.dumps(payload)))
        db.execute("INSERT INTO kv(key, value) VALUES('launch:0badc0de', ?)",
                   (json.dumps({"cluster": "ad", "submitting_after": 1}),))
    db.close()
    d = DaemonProc().start()
    try:
        with Client(autostart=False) as c:
            wait_for(lambda: c.get("/v1/requests/0badc0de")["status"] in
                     ("SUCCEEDED", "FAILED"), timeout=60)
            row = c.get("/v1/requests/0badc0de")
            assert row["status"] == "SUCCEEDED", row
            assert row["result"]["job_id"] == 2
            jobs = c.get("/v1/clusters/ad/queue")["jobs"]
            assert sorted(j["job_id"] for j in jobs) == [1, 2]  # no job 3: it ran once
    finally:
        try:
            assert cli("down", "-y", "ad").returncode == 0
        finally:
            d.terminate()
            d.cleanup()
