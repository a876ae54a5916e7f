"""Node agent, single node: real agent processes, real gRPC over TCP localhost."""

# ruff: noqa: UP031

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from tests.nodeagent.test_nodeagent_helpers import (
    AgentFactory,
    agents,
    pid_alive,
    read_log,
    wait_status,
)

__all__ = ["agents"]
pytestmark = pytest.mark.anyio


async def test_submit_env_logs_and_queue(agents: AgentFactory, tmp_path: Path) -> None:
    a = agents.start(args=["--gpus", "H100:2", "--cpus", "4"])
    workdir = tmp_path / "wd"
    workdir.mkdir()
    run = ('echo "run rank=$SKYPILOT_NODE_RANK nodes=$SKYPILOT_NUM_NODES ips=$SKYPILOT_NODE_IPS"\n'
           'echo "cuda=$CUDA_VISIBLE_DEVICES gpus=$SKYPILOT_NUM_GPUS_PER_NODE foo=$FOO"\n'
           'echo "skyd=$SKYD_NODE_RANK id=$SKYPILOT_INTERNAL_JOB_ID task=$SKYPILOT_TASK_ID"\n'
           'echo "info=$SKYPILOT_CLUSTER_INFO user=$SKYPILOT_USER pwd=$(pwd)"\n'
           'for i in 1 2 3; do echo line$i; done')  # fmt: skip
    setup = 'echo "setup rank=$SKYPILOT_SETUP_NODE_RANK ips=$SKYPILOT_SETUP_NODE_IPS"'
    async with a.client() as c:
        assert await c.health()
        j1 = await c.submit_job({"name": "t", "setup": setup, "run": run, "envs": {"FOO": "bar"},
                                 "workdir": str(workdir), "gpus": 1, "cpus": 1,
                                 "username": "alice"})  # fmt: skip
        assert j1 == 1
        log = await read_log(c, j1)
        job = await wait_status(c, j1, "SUCCEEDED")
        assert job["exit_code"] == 0 and job["name"] == "t" and job["username"] == "alice"
        assert job["gpu_slots"] == [0] and job["task_id"].endswith("_c1_1")
        lines = log.splitlines()
        assert lines[0] == "setup rank=0 ips=127.0.0.1"
        assert "run rank=0 nodes=1 ips=127.0.0.1" in lines
        assert "cuda=0 gpus=1 foo=bar" in lines
        assert "skyd=0 id=1 task={}".format(job["task_id"]) in lines
        assert '"cluster_name": "c1"' in log and f"user=alice pwd={workdir}" in log
        assert await read_log(c, j1, follow=False, tail=2) == "line2\nline3\n"
        assert await read_log(c, 0, follow=False, tail=1) == "line3\n"  # 0 = latest job
        j2 = await c.submit_job({"run": "true"})
        assert j2 == 2
        await wait_status(c, j2, "SUCCEEDED")
        assert [j["job_id"] for j in await c.job_queue()] == [1, 2]
        assert await c.job_queue(skip_finished=True) == []
        st = await c.status()
        assert [g["name"] for g in st["gpus"]] == ["H100", "H100"] and st["cpus"] == 4
        assert st["running"] == 0 and st["pending"] == 0 and st["cluster"] == "c1"
        with pytest.raises(GRPCError) as ei:
            await read_log(c, 99)
        assert ei.value.status == Status.NOT_FOUND
        with pytest.raises(GRPCError) as ei:
            await c.submit_job({"run": "true", "gpus": 3})
        assert ei.value.status == Status.INVALID_ARGUMENT and "gpus" in str(ei.value.message)


async def test_follow_streams_while_running(agents: AgentFactory) -> None:
    a = agents.start()
    async with a.client() as c:
        j = await c.submit_job({"run": "echo first; sleep 0.8; echo second; exit 0"})
        t0 = time.monotonic()
        first_at = None
        out = b""
        async for chunk in c.tail_logs(j, follow=True):
            out += chunk
            if first_at is None:
                first_at = time.monotonic() - t0
        assert out == b"first\nsecond\n"
        assert first_at is not None and first_at < 0.6  # streamed before the job ended
        assert (await c.job_queue(job_ids=[j]))[0]["status"] == "SUCCEEDED"


async def test_failures_exit_code_and_setup(agents: AgentFactory, tmp_path: Path) -> None:
    a = agents.start()
    marker = tmp_path / "ran"
    async with a.client() as c:
        j1 = await c.submit_job({"run": "echo oops; exit 7"})
        j2 = await c.submit_job({"setup": "echo bad setup; exit 3", "run": f"touch {marker}"})
        job1 = await wait_status(c, j1, "FAILED")
        assert job1["exit_code"] == 7
        job2 = await wait_status(c, j2, "FAILED_SETUP")
        assert job2["exit_code"] == 3 and "setup" in job2["reason"]
        assert await read_log(c, j2) == "bad setup\n"
        assert not marker.exists()  # run never started


async def test_cancel_kills_process_tree(agents: AgentFactory, tmp_path: Path) -> None:
    a = agents.start(args=["--cpus", "1"])
    pids = tmp_path / "pids"
    run = f"sleep 300 & echo $! >> {pids}; (sleep 300; echo never) & echo $! >> {pids}; wait"
    async with a.client() as c:
        j = await c.submit_job({"run": run, "cpus": 1})
        pending = await c.submit_job({"run": "sleep 300", "cpus": 1})
        await wait_status(c, j, "RUNNING")
        while len(pids.read_text().split() if pids.exists() else []) < 2:
            await asyncio.sleep(0.02)
        children = [int(p) for p in pids.read_text().split()]
        assert all(pid_alive(p) for p in children)
        assert sorted(await c.cancel_jobs([j])) == [j]
        assert (await c.job_queue(job_ids=[j]))[0]["status"] == "CANCELLED"
        assert not any(pid_alive(p) for p in children)
        assert await c.cancel_jobs(None) == [pending]  # all = every non-terminal job
        assert (await c.job_queue(job_ids=[pending]))[0]["status"] == "CANCELLED"
        assert await c.cancel_jobs(None) == []


async def test_capacity_pending_and_gpu_slots(agents: AgentFactory, tmp_path: Path) -> None:
    a = agents.start(args=["--cpus", "2", "--gpus", "H100:2"])
    go = tmp_path / "go"
    wait_go = f"while [ ! -e {go} ]; do sleep 0.05; done; echo cuda=$CUDA_VISIBLE_DEVICES"
    async with a.client() as c:
        big = await c.submit_job({"run": wait_go, "gpus": 2, "cpus": 1})
        blocked = await c.submit_job({"run": "echo cuda=$CUDA_VISIBLE_DEVICES", "gpus": 1})
        small = await c.submit_job({"run": wait_go, "cpus": 1})
        over = await c.submit_job({"run": "true", "cpus": 1})
        await wait_status(c, big, "RUNNING")
        await wait_status(c, small, "RUNNING")  # fits: not blocked by the job before it
        await asyncio.sleep(0.5)
        q = {j["job_id"]: j["status"] for j in await c.job_queue()}
        assert q[blocked] == "PENDING" and q[over] == "PENDING"
        assert (await c.status())["pending"] == 2
        go.touch()
        for j in (big, blocked, small, over):
            await wait_status(c, j, "SUCCEEDED")
        assert "cuda=0,1" in await read_log(c, big)
        assert (await read_log(c, blocked)).strip() in ("cuda=0", "cuda=1")


async def test_amd_visibility_env(agents: AgentFactory) -> None:
    a = agents.start(args=["--gpus", "MI300X:8"])
    async with a.client() as c:
        j = await c.submit_job(
            {
                "run": 'echo "hip=$HIP_VISIBLE_DEVICES rocr=$ROCR_VISIBLE_DEVICES '
                'cuda=${CUDA_VISIBLE_DEVICES-unset}"',
                "gpus": 2,
            }  # fmt: skip
        )
        await wait_status(c, j, "SUCCEEDED")
        assert await read_log(c, j) == "hip=0,1 rocr=0,1 cuda=unset\n"
        assert {g["vendor"] for g in (await c.status())["gpus"]} == {"amd"}


async def test_wrong_cluster_secret_is_rejected(agents: AgentFactory) -> None:
    """A client of another cluster (its certificate signed by another CA) gets no call
    through: the TLS handshake fails before any request."""
    a = agents.start()
    async with a.client(token="wrong") as c:
        assert await c.health() is False
        for call in (c.job_queue(), c.submit_job({"run": "true"})):
            with pytest.raises(OSError):
                await call
    async with a.client() as c:
        assert await c.job_queue() == []  # nothing was submitted


async def test_neither_end_of_the_agents_grpc_loads_googleapis_protos(agents: AgentFactory) -> None:
    """grpclib, left to choose its codec, loads googleapis' status protos (protobuf and its
    upb extension, ~25 ms of every agent start and of a daemon's first call) for error
    details skyd never sends: the agent's server and its clients name the codec."""
    import subprocess
    import sys

    a = agents.start()
    code = ("import asyncio, sys\n"
            "from skyd.nodeagent.client import AgentClient\n"
            "async def main():\n"
            "    async with AgentClient('127.0.0.1', %d, %r) as c:\n"
            "        assert await c.health()\n"
            "asyncio.run(main())\n"
            "print(sorted(m for m in sys.modules if m.startswith('google')))\n"
            "import betterproto\n"
            "print(betterproto.__version__, 'importlib.metadata' in sys.modules)\n"
            % (a.info["port"], a.token))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    google, version = r.stdout.splitlines()
    assert google == "[]"
    # nor importlib.metadata, which betterproto uses to read its own version (skyd/proto)
    import importlib.metadata

    assert version.split() == [importlib.metadata.version("betterproto"), "False"]
    maps = Path("/proc/%d/maps" % a.info["pid"]).read_text()
    assert "google" not in maps, "the agent loaded protobuf"
