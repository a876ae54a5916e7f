"""Worker pools on `local`: `skyd jobs pool apply` makes N worker clusters, `skyd jobs
launch -p` runs managed jobs on them (one per worker at a time), `pool down` removes them.
Real daemon, real agents, real CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pipeline import Env, cli, module_env, wait_for, write


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with module_env(tmp_path_factory, SKYD_JOBS_POLL="0.1") as e:
        yield e


def _job(jid: int) -> dict[str, object]:
    from skyd import sdk

    return dict(sdk.get(f"/v1/jobs/{jid}"))


def test_pool_runs_jobs_on_its_workers(env: Env, tmp_path: Path) -> None:
    pool = write(tmp_path / "pool.yaml", "setup: echo pool-setup-ran\npool:\n  workers: 2\n")
    env.ok("jobs", "pool", "apply", str(pool), "-p", "pl", "-y")
    st = env.json("jobs", "pool", "status", "pl")
    assert [w["cluster"] for w in st[0]["worker_rows"]] == ["pl-w0", "pl-w1"]
    assert {w["status"] for w in st[0]["worker_rows"]} == {"READY"}
    assert sorted(r["name"] for r in env.json("status")) == ["pl-w0", "pl-w1"]
    assert "pool-setup-ran" in env.ok("jobs", "pool", "logs", "pl", "1").stdout

    job = write(tmp_path / "job.yaml",
                "name: pj\nrun: echo rank=$SKYPILOT_JOB_RANK of=$SKYPILOT_NUM_JOBS; sleep 1\n")
    r = env.ok("jobs", "launch", "-p", "pl", "--num-jobs", "3", "-d", "-o", "json", str(job))
    ids = json.loads(r.stdout)["job_ids"]
    assert len(ids) == 3
    wait_for(lambda: all(_job(i)["status"] == "SUCCEEDED" for i in ids), timeout=40, interval=0.2)
    spans = []
    for i in ids:
        atts = _job(i)["attempts"]
        assert isinstance(atts, list) and len(atts) == 1
        assert atts[0]["cluster"] in ("pl-w0", "pl-w1")  # ran on a worker, nothing new made
        spans.append((float(atts[0]["started_at"]), float(atts[0]["ended_at"]), atts[0]["cluster"]))
    for a in spans:  # one job per worker at a time ...
        assert not [b for b in spans if b is not a and b[2] == a[2] and b[0] < a[1] and a[0] < b[1]]
    edges = sorted([(s, 1) for s, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    running = peak = 0
    for _, d in edges:  # ... so never more than the 2 workers at once
        running += d
        peak = max(peak, running)
    assert peak <= 2, spans
    outs = " ".join(env.ok("jobs", "logs", str(i), "--no-follow").stdout for i in ids)
    assert all(f"rank={k} of=3" in outs for k in range(3)), outs
    assert sorted(r["name"] for r in env.json("status")) == ["pl-w0", "pl-w1"]

    # Scale down to 1 (an idle worker goes), then the pool goes with its clusters.
    env.ok("jobs", "pool", "apply", str(pool), "-p", "pl", "--workers", "1")
    assert [r["name"] for r in env.json("status")] == ["pl-w0"]
    env.ok("jobs", "pool", "down", "pl", "-y")
    assert env.json("status") == []
    assert env.json("jobs", "pool", "status") == []


def test_pool_mistakes(env: Env, tmp_path: Path) -> None:
    job = write(tmp_path / "job.yaml", "run: echo hi\n")
    before = len(env.json("jobs", "queue"))
    r = cli("jobs", "launch", "-p", "nopool", "-d", str(job))
    assert r.returncode != 0 and "no worker pool 'nopool'" in r.stderr
    assert len(env.json("jobs", "queue")) == before  # nothing submitted
    pool = write(tmp_path / "pool.yaml", "setup: echo x\n")
    r = cli("jobs", "pool", "apply", str(pool), "-p", "p2", "--workers", "-1")
    assert r.returncode != 0 and "workers must be an integer >= 0" in r.stderr
    r = cli("jobs", "pool", "down", "nopool", "-y")
    assert r.returncode != 0 and "no worker pool 'nopool'" in r.stderr
    assert env.json("status") == []


def test_pool_down_cancels_its_jobs(env: Env, tmp_path: Path) -> None:
    pool = write(tmp_path / "pool.yaml", "setup: echo x\n")
    env.ok("jobs", "pool", "apply", str(pool), "-p", "pd", "--workers", "1")
    job = write(tmp_path / "job.yaml", "run: sleep 300\n")
    ids = [json.loads(env.ok("jobs", "launch", "-p", "pd", "-d", "-o", "json", str(job)).stdout)
           ["job_id"] for _ in range(2)]
    wait_for(lambda: _job(ids[0])["status"] == "RUNNING", timeout=20, interval=0.1)
    assert _job(ids[1])["status"] == "PENDING"  # the only worker is busy
    st = env.json("jobs", "pool", "status")
    assert st[0]["worker_rows"][0]["job_id"] == ids[0]
    env.ok("jobs", "pool", "down", "-a", "-y")
    assert [_job(i)["status"] for i in ids] == ["CANCELLED", "CANCELLED"]
    assert env.json("status") == [] and env.json("jobs", "pool", "status") == []
