"""kill -9 the jobs controller at seeded random points; restart; nothing lost or doubled.

The controller runs in a child process against a SimClusterOps whose state lives in a JSON
file (so the simulated cloud survives the controller's death, and jobs keep running while
it is dead). The parent submits jobs with scripted outcomes and cancels some while the
child is down, kills the child at random moments 30 times, then lets it finish and checks:
every job reached the state its script implies, no (cluster, attempt) was launched twice,
no launch happened on a cluster whose job was still alive, and no cluster is left.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from skyd.jobs.controller import JobsConfig
from skyd.jobs.manager import resume_all
from skyd.jobs.sim import SimClusterOps
from skyd.jobs.spec import build_dag
from skyd.jobs.state import JobsDB

ROOT = Path(__file__).resolve().parents[2]

SCRIPTS: list[tuple[list[str], int, list[int]]] = [
    (["ok"], 0, []),
    (["preempt", "ok"], 0, []),
    (["preempt", "preempt", "ok"], 0, []),
    (["exit:3"], 0, []),
    (["exit:3", "ok"], 1, []),
    (["exit:3", "exit:3"], 1, []),
    (["exit:33", "preempt", "ok"], 0, [33]),
    (["setup_fail"], 0, []),
]


def expected(outcomes: list[str], max_restarts: int, codes: list[int]) -> str:
    restarts = 0
    for n in range(20):
        o = outcomes[min(n, len(outcomes) - 1)]
        if o == "ok":
            return "SUCCEEDED"
        if o == "preempt":
            continue
        code = 1 if o == "setup_fail" else int(o.split(":")[1])
        if code in codes and o != "setup_fail":
            continue
        if restarts < max_restarts:
            restarts += 1
            continue
        return "FAILED_SETUP" if o == "setup_fail" else "FAILED"
    raise AssertionError("script does not end")


def config() -> JobsConfig:
    return JobsConfig(poll_interval=0.03, backoff_initial=0.01, backoff_max=0.05,
                      user_failure_grace=0.0, unreachable_grace=2, max_concurrent_launches=4)  # fmt: skip


async def child(d: Path) -> None:
    db = await JobsDB.open(d / "jobs.db")
    sim = SimClusterOps(state_file=d / "sim.json", launch_delay=0.1)
    async with anyio.create_task_group() as tg:
        await resume_all(db, sim, lambda n, f, *a: tg.start_soon(f, *a), config())
        print("ready", flush=True)
        while await db.unfinished_or_dirty():
            await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    await db.close()


async def run_child(d: Path, kill_after: float | None) -> None:
    proc = await anyio.open_process(
        [sys.executable, "-m", "tests.jobs.test_jobs_crash", str(d)], cwd=str(ROOT)
    )
    if kill_after is None:
        with anyio.fail_after(60):
            rc = await proc.wait()
        assert rc == 0, (await proc.stderr.receive() if proc.stderr else b"").decode()  # type: ignore[union-attr]
        return
    with anyio.fail_after(20):  # kill points are counted from the controller being up
        assert proc.stdout is not None
        buf = b""
        while b"ready" not in buf:
            buf += await proc.stdout.receive()
    with anyio.move_on_after(kill_after):
        await proc.wait()
    if proc.returncode is None:
        proc.kill()  # SIGKILL
    await proc.wait()


@pytest.mark.anyio
async def test_kill9_at_random_points(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("SKYD_CRASH_SEED", "20261130")))
    db = await JobsDB.open(tmp_path / "jobs.db")
    want: dict[int, str] = {}
    try:
        for it in range(30):
            # While the controller is dead: submit work, and sometimes cancel something.
            for _ in range(rng.choice([0, 1, 2, 3])):
                outcomes, mr, codes = rng.choice(SCRIPTS)
                jr: dict[str, Any] = {"max_restarts_on_errors": mr, "recover_on_exit_codes": codes}
                sim = {"duration": rng.uniform(0.05, 0.4), "outcomes": outcomes}
                docs = [{"name": f"j{it}", "sim": sim, "resources": {"job_recovery": jr}}]
                if rng.random() < 0.25:  # a two-task pipeline
                    docs = [{"name": f"p{it}", "sim": {"duration": 0.05}}, docs[0]]
                name, dag = build_dag(docs)
                jid = await db.create_job(name=name, dag_json=json.dumps(dag), strategy=None,
                                          priority=rng.randint(0, 2))  # fmt: skip
                want[jid] = expected(outcomes, mr, codes)
            active = [r["id"] for r in await db.list_jobs(skip_finished=True)]
            if active and rng.random() < 0.15:
                victim = rng.choice(active)
                if await db.request_cancel(victim) is not None:
                    want[victim] = "CANCELLED"
            await run_child(tmp_path, rng.uniform(0.0, 0.5))
        await run_child(tmp_path, None)  # let it finish
        rows = {r["id"]: r for r in await db.list_jobs()}
        got = {j: rows[j]["status"] for j in want}
        assert got == want
        assert all(rows[j]["cluster"] is None for j in want)
        attempts = [a for j in want for a in await db.attempts(j)]
    finally:
        await db.close()
    state = json.loads((tmp_path / "sim.json").read_text())
    assert state["violations"] == []
    assert state["clusters"] == {}  # no orphan cluster
    keys = [(e[0], e[1]) for e in state["launch_log"]]
    assert len(keys) == len(set(keys))  # no attempt launched twice
    seen = {a["status"] for a in attempts}
    print(f"{len(want)} jobs, {len(attempts)} attempts, attempt states {sorted(seen)}")
    assert len(want) >= 30 and {"PREEMPTED", "SUCCEEDED", "INTERRUPTED"} <= seen


if __name__ == "__main__":
    anyio.run(child, Path(sys.argv[1]))
