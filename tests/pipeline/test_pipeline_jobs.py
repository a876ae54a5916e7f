"""Jobs on `local` clusters: concurrency against capacity, cancel of a process tree,
multi-node gang jobs. Real daemon, real agents, real CLI."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.pipeline import Env, cli, module_env, procs_matching, wait_for, write


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with module_env(tmp_path_factory) as e:
        yield e


def _cpus(env: Env, cluster: str) -> float:
    row = env.status(cluster)
    assert row is not None
    return float(row["resources"]["cpus"])


def test_concurrent_jobs_and_capacity(env: Env, tmp_path: Path) -> None:
    env.ok("launch", "-c", "pj-conc", "echo up")
    half = _cpus(env, "pj-conc") / 2  # two jobs fill the node
    gate = tmp_path / "gate"  # the jobs run until the test opens it, however slow the CLI is
    for _ in range(3):
        r = env.ok("exec", "pj-conc", "-d", "--cpus", f"{half:g}",
                   f"until [ -e {gate} ]; do sleep 0.05; done")
        assert "submitted" in r.stderr
    # Jobs 2 and 3 run together; job 4 waits for capacity.
    wait_for(lambda: {j["job_id"]: j["status"] for j in env.queue("pj-conc")}.get(3) == "RUNNING",
             timeout=20, interval=0.1)
    q = {j["job_id"]: j["status"] for j in env.queue("pj-conc")}
    assert q[2] == "RUNNING" and q[3] == "RUNNING" and q[4] == "PENDING", q
    gate.touch()
    # 4 can end before one of 2 and 3 has (it needs only one of them gone): wait for all
    for job_id in (2, 3, 4):
        env.wait_job("pj-conc", job_id, {"SUCCEEDED"}, timeout=20)
    jobs = {j["job_id"]: j for j in env.queue("pj-conc")}
    # 2 and 3 overlapped; 4 started only after one of them ended.
    assert jobs[3]["started_at"] < jobs[2]["ended_at"]
    assert jobs[4]["started_at"] >= min(jobs[2]["ended_at"], jobs[3]["ended_at"]) - 0.05
    q_skip = env.json("queue", "pj-conc", "-s")
    assert q_skip[0]["jobs"] == []


def test_cancel_process_tree_and_cancel_all(env: Env) -> None:
    env.ok("launch", "-c", "pj-cancel", "echo up")
    marker = f"mark{uuid.uuid4().hex[:8]}"
    # A tree: job shell -> bash (-> bash -> sleep, sleep), bash -> sleep; the bashes carry
    # the marker in their command lines, the sleeps a unique duration.
    n = 3000 + uuid.uuid4().int % 1000
    cmd = (f"bash -c 'bash -c \"sleep {n}; : {marker}-a\" & sleep {n + 1}; : {marker}-b' & "
           f"bash -c 'sleep {n + 2}; : {marker}-c' & wait")
    env.ok("exec", "pj-cancel", "-d", "--cpus", "0.1", cmd)
    sleeps = [f"sleep\0{n + i}\0" for i in range(3)]
    wait_for(lambda: len(procs_matching(marker)) == 3 and all(procs_matching(s) for s in sleeps),
             timeout=10, interval=0.1)
    env.wait_job("pj-cancel", 2, {"RUNNING"})
    r = env.ok("cancel", "pj-cancel", "2", "-y")
    assert "2" in r.stdout
    assert env.job("pj-cancel", 2)["status"] == "CANCELLED"
    # cancel returns once the processes are gone: nothing of the tree is left.
    assert procs_matching(marker) == []
    assert not any(procs_matching(s) for s in sleeps)
    # cancel -a: every unfinished job, running and pending.
    m2 = f"mark{uuid.uuid4().hex[:8]}"
    for i in range(3):
        env.ok("exec", "pj-cancel", "-d", "--cpus", f"{_cpus(env, 'pj-cancel') / 2:g}",
               f"sleep 3{i}0 # {m2}")
    env.wait_job("pj-cancel", 4, {"RUNNING"})
    assert env.job("pj-cancel", 5)["status"] == "PENDING"
    env.ok("cancel", "pj-cancel", "-a", "-y")
    q = {j["job_id"]: j["status"] for j in env.queue("pj-cancel")}
    assert q[1] == "SUCCEEDED" and q[2] == "CANCELLED"
    assert q[3] == q[4] == q[5] == "CANCELLED", q
    wait_for(lambda: procs_matching(m2) == [], timeout=10, interval=0.1)


def test_three_nodes_gang(env: Env, tmp_path: Path) -> None:
    y = write(tmp_path / "gang.yaml", """\
num_nodes: 3
run: |
  echo "rank=$SKYPILOT_NODE_RANK n=$SKYPILOT_NUM_NODES ips=$(echo "$SKYPILOT_NODE_IPS" | wc -l)"
""")
    r = env.ok("launch", "-c", "pj-gang", str(y))
    ranks = sorted(ln for ln in r.stdout.splitlines() if "rank=" in ln)
    assert len(ranks) == 3, r.stdout
    for i, line in enumerate(ranks):
        assert f"rank={i} n=3 ips=3" in line
    assert sorted(p.name for p in env.cluster_dir("pj-gang").iterdir()) == ["node-0", "node-1", "node-2"]
    assert len(env.agent_pids("pj-gang")) == 3
    row = env.status("pj-gang")
    assert row is not None and row["num_nodes"] == 3
    # One rank failing fails the job on every rank (the others get killed).
    marker = f"gang{uuid.uuid4().hex[:8]}"
    r = cli("exec", "pj-gang",
            f'if [ "$SKYPILOT_NODE_RANK" = 1 ]; then sleep 0.5; exit 5; fi; sleep 60 # {marker}')
    assert r.returncode != 0
    j = env.job("pj-gang", 2)
    assert j["status"] == "FAILED", j
    wait_for(lambda: procs_matching(marker) == [], timeout=10, interval=0.1)
    env.ok("down", "pj-gang", "-y")
    assert env.agent_pids("pj-gang") == []
    assert not env.cluster_dir("pj-gang").exists()
    assert os.path.isdir(env.home)
