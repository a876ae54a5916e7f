"""A gang job whose node agent dies ends on every node: no rank's process runs on unseen.

Real agent processes on 127.0.0.1 (tests.nodeagent.test_nodeagent_helpers); kill -9 as a crash does.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.nodeagent.test_nodeagent_helpers import AgentFactory, agents, pid_alive, wait_status

__all__ = ["agents"]
pytestmark = pytest.mark.anyio

RUN = 'echo $$ > "$PIDS/rank-$SKYPILOT_NODE_RANK"; sleep 300'


def _spec(nodes: list, pids: Path) -> dict:
    refs = [{"rank": i, "address": n.address, "internal_ip": "127.0.0.1"}
            for i, n in enumerate(nodes)]  # fmt: skip
    return {"run": RUN, "num_nodes": len(nodes), "nodes": refs, "envs": {"PIDS": str(pids)}}


def _rank_pids(pids: Path, n: int, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = [pids / f"rank-{r}" for r in range(n)]
        if all(f.exists() and f.read_text().strip() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.05)
    raise AssertionError(f"not every rank started: {sorted(p.name for p in pids.iterdir())}")


def _all_gone(pids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(pid_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


async def test_worker_agent_killed_ends_every_rank(agents: AgentFactory, tmp_path: Path) -> None:
    """The head gives up on a worker it cannot reach after the rank lease (5 s here, 30 s by
    default: the job would not have failed within the wait below)."""
    nodes = [agents.start(f"n{r}", rank=r, args=["--rank-lease", "5"]) for r in range(2)]
    pids = tmp_path / "pids"
    pids.mkdir()
    async with nodes[0].client() as c:
        j = await c.submit_job(_spec(nodes, pids))
        head_rank, worker_rank = _rank_pids(pids, 2)
        nodes[1].kill9()
        assert _all_gone([worker_rank], 5), "the worker's rank outlived its agent"
        job = await wait_status(c, j, "FAILED_DRIVER", timeout=25)
        assert "rank 1" in job["reason"]
        assert _all_gone([head_rank], 10), "the head's rank outlived the job"


async def test_head_agent_killed_ends_every_rank(agents: AgentFactory, tmp_path: Path) -> None:
    nodes = [agents.start("n0", rank=0)]
    nodes.append(agents.start("n1", rank=1, args=["--rank-lease", "3"]))
    pids = tmp_path / "pids"
    pids.mkdir()
    async with nodes[0].client() as c:
        j = await c.submit_job(_spec(nodes, pids))
        head_rank, worker_rank = _rank_pids(pids, 2)
    nodes[0].kill9()
    assert _all_gone([head_rank], 5), "the head's rank outlived its agent"
    assert _all_gone([worker_rank], 30), "the worker's rank outlived its head"
    # A restarted head finds the job's rank gone: the job ends (nothing to adopt).
    head = agents.restart(nodes[0])
    async with head.client() as c:
        job = await wait_status(c, j, "FAILED_DRIVER", timeout=60)
        assert job["exit_code"] is None
        assert await c.cancel_jobs([j]) == []  # nothing left to cancel


async def test_a_worker_leaves_alone_a_rank_its_head_is_waiting_on(agents: AgentFactory,
                                                                  tmp_path: Path) -> None:  # fmt: skip
    """The head's long poll of a rank is the head asking: a worker whose lease (2 s) is
    shorter than the head's poll (10 s at the default lease) does not end the rank under it."""
    nodes = [agents.start("n0", rank=0), agents.start("n1", rank=1, args=["--rank-lease", "2"])]
    async with nodes[0].client() as c:
        refs = [{"rank": i, "address": n.address, "internal_ip": "127.0.0.1"}
                for i, n in enumerate(nodes)]  # fmt: skip
        j = await c.submit_job({"run": "sleep 6", "num_nodes": 2, "nodes": refs})
        job = await wait_status(c, j, {"SUCCEEDED", "FAILED"}, timeout=60)
        assert job["status"] == "SUCCEEDED", job


async def test_single_node_jobs_still_survive_their_agent(agents: AgentFactory, tmp_path: Path) -> None:
    """Only multi-node jobs are tied to their agents' lives (a single-node job is adopted)."""
    a = agents.start()
    pids = tmp_path / "pids"
    pids.mkdir()
    async with a.client() as c:
        await c.submit_job({"run": RUN.replace("$SKYPILOT_NODE_RANK", "0"),
                            "envs": {"PIDS": str(pids)}})  # fmt: skip
        (pid,) = _rank_pids(pids, 1)
    a.kill9()
    time.sleep(1.0)
    assert pid_alive(pid)
