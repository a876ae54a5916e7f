"""What a daemon killed mid-way finds when it comes back: provisioning resumed with the same
agent token, one agent per node, managed-job writes that never hit "database is locked",
controller-side launch errors named as such, followers that re-attach."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.daemon import DaemonProc, guarded_pythonpath, wait_for

pytestmark = pytest.mark.anyio


async def _store(home: Path) -> Any:
    from skyd.daemon.store import Store
    from skyd.pipeline import schema  # noqa: F401 - the clusters' tables

    s = Store(home / "state.db")
    await s.open()
    return s


async def test_resumed_provision_hands_the_running_agents_the_same_token(skyd_home: Path) -> None:
    """The daemon died after the agents started but before the handle was saved: the
    resumed provisioning must reach them (it used to write a new token -> UNAUTHENTICATED)."""
    import skyd.clouds.local  # noqa: F401 - registers the `local` infra
    from skyd.clouds.base import ProvisionRequest, get_cloud
    from skyd.jobs.pipeline_ops import _Ctx
    from skyd.models.loader import task_from_config
    from skyd.pipeline import clusters_db as cdb
    from skyd.pipeline.agents import agent_healthy
    from skyd.pipeline.launch import _provision
    from skyd.pipeline.provision import provision_token

    store = await _store(skyd_home)
    prov = get_cloud("local").provisioner()
    off = get_cloud("local").dynamic_offerings()[0]  # type: ignore[index]
    try:
        ctx = _Ctx(store, lambda _: None, "req1")
        # The first life: token persisted, agents started, then the daemon died.
        await cdb.insert_init(store, "c1", request_id="req1", resources={}, num_nodes=1)
        token = await provision_token(store, "req1", "c1")
        first = await prov.provision(
            ProvisionRequest(cluster_name="c1", num_nodes=1, offering=off, use_spot=False,
                             token=token), lambda _: None)  # fmt: skip
        pid = json.loads((skyd_home / "local/c1/node-0/agent.json").read_text())["pid"]
        # The resumed request runs the provisioning again.
        task = task_from_config({"run": "echo hi", "resources": {"infra": "local"}})
        handle = await _provision(ctx, task, "c1", {})
        assert handle.token == first.token
        assert await agent_healthy(prov, handle)
        again = json.loads((skyd_home / "local/c1/node-0/agent.json").read_text())["pid"]
        assert again == pid  # the running agent was reused, not doubled
        # The token is dropped from kv once the handle (which carries it) is saved.
        assert await store.fetchone("SELECT * FROM kv WHERE key LIKE 'provision-token:%'") is None
    finally:
        from skyd.clouds.base import PartialHandle

        await prov.forget(PartialHandle("c1", "local", None, None, "c1"))
        await store.close()


def test_a_second_agent_on_one_home_takes_over(tmp_path: Path) -> None:
    """A daemon that died between starting an agent and reading its agent.json starts
    another: exactly one agent may remain on the node (the older one used to leak)."""
    from skyd.nodeagent.client import start_agent_detached_blocking

    home = tmp_path / "node"
    (home).mkdir()
    kw: dict[str, Any] = {"cluster_secret": "t0k3n", "cluster": "c"}
    a = start_agent_detached_blocking(home, **kw)
    try:
        b = start_agent_detached_blocking(home, **kw)
        assert a["pid"] != b["pid"]
        wait_for(lambda: not _alive(a["pid"]), timeout=15)
        assert _alive(b["pid"])
    finally:
        for info in (a, locals().get("b")):
            if info and _alive(info["pid"]):
                os.kill(info["pid"], signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class _BrokenAgentOps:
    """A ClusterOps whose launches fail on our side (the agent refuses the token), never
    for lack of resources; records teardowns."""

    def __init__(self) -> None:
        self.torn: list[str] = []
        self.launches = 0

    async def launch(self, task: Any, cluster_name: str, *, blocked: Any, log: Any) -> Any:
        self.launches += 1
        raise RuntimeError("GRPCError: UNAUTHENTICATED: missing or wrong cluster token")

    async def job_status(self, cluster_name: str, job_id: int) -> Any:
        return None

    async def cluster_status(self, cluster_name: str) -> str:
        return "TERMINATED"

    async def cancel_job(self, cluster_name: str, job_id: int) -> None:
        return None

    async def teardown(self, cluster_name: str) -> None:
        self.torn.append(cluster_name)

    async def tail_logs(self, cluster_name: str, job_id: int, follow: bool) -> Any:
        if False:  # pragma: no cover - an async generator with nothing to give
            yield b""


async def test_controller_side_launch_error_is_never_failed_no_resource(tmp_path: Path) -> None:
    from skyd.jobs.controller import JobsConfig
    from skyd.jobs.manager import JobsManager
    from skyd.jobs.state import JobsDB

    db = await JobsDB.open(tmp_path / "jobs.db")
    ops = _BrokenAgentOps()
    cfg = JobsConfig(poll_interval=0.02, backoff_initial=0.01, backoff_max=0.02)
    try:
        async with anyio.create_task_group() as tg:
            m = JobsManager(db, ops, lambda n, f, *a: tg.start_soon(f, *a), cfg)  # type: ignore[arg-type]
            jid = await m.submit([{"name": "x", "run": "echo hi"}])
            with anyio.fail_after(20):
                status = await m.wait(jid)
        row = await db.get_job(jid)
        assert row is not None
        assert status == "FAILED_CONTROLLER", row
        assert "UNAUTHENTICATED" in row["failure_reason"]
        assert ops.launches >= 3  # our own glitches are retried a few rounds first
        assert row["cluster"] is None and f"skyd-jobs-{jid}-0" in ops.torn  # nothing left
        att = (await db.attempts(jid))[-1]
        assert att["status"] == "LAUNCH_FAILED" and att["ended_at"] is not None
    finally:
        await db.close()


async def test_managed_job_writes_queue_behind_the_store_and_never_lock(skyd_home: Path) -> None:
    """One writer per process: a managed-jobs write waits for a store transaction instead
    of racing it for SQLite's lock (it used to busy-wait and end "database is locked")."""
    from skyd.jobs.state import JobsDB

    store = await _store(skyd_home)
    db = await JobsDB.open(store.path, lock=store.write_lock)
    order: list[str] = []
    try:
        async def create() -> None:
            await db.create_job(name="j", dag_json="{}", strategy=None)
            order.append("job")

        async with anyio.create_task_group() as tg:
            async with store.tx() as tx:
                tg.start_soon(create)
                await anyio.sleep(0.3)
                await tx.execute("INSERT INTO kv (key, value) VALUES ('k', '1')")
                order.append("store")
        assert order == ["store", "job"]
    finally:
        await db.close()
        await store.close()


async def test_store_write_outlasts_another_writer_past_the_busy_timeout(skyd_home: Path) -> None:
    """Another process holding the write lock longer than busy_timeout (5 s) delays a
    write; it used to fail with "database is locked"."""
    store = await _store(skyd_home)
    held = threading.Event()

    def hold() -> None:
        c = sqlite3.connect(str(store.path), isolation_level=None)
        c.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(6.0)
        c.execute("COMMIT")
        c.close()

    t = threading.Thread(target=hold)
    t.start()
    try:
        held.wait(5)
        await store.kv_set("x", 1)
        assert await store.kv_get("x") == 1
    finally:
        t.join()
        await store.close()


def test_cli_reattaches_when_the_daemon_dies_under_a_launch(skyd_home: Path) -> None:
    """`skyd launch` in the foreground while the daemon is killed -9 and restarted: the CLI
    says so, re-attaches, and ends with the job's output (it used to die with "internal
    error: IncompleteRead")."""
    d = DaemonProc().start()
    env = {**os.environ, "SKYD_NO_AUTOSTART": "1", "PYTHONPATH": guarded_pythonpath()}
    cmd = [sys.executable, "-m", "skyd.cli.main", "launch", "-y", "-c", "re",
           "echo first; sleep 4; echo second-line"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (skyd_home / "local/re/node-0/jobs/1").exists(), timeout=30)
        time.sleep(0.5)
        d.kill9()
        d.cleanup()
        time.sleep(0.5)
        d = DaemonProc().start()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, (out, err)
        assert "internal error" not in err
        assert "daemon restarted; re-attached" in err
        assert "second-line" in out and out.count("first") == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run([sys.executable, "-m", "skyd.cli.main", "down", "-y", "re"], env=env,
                       capture_output=True, timeout=60)  # fmt: skip
        d.terminate()
        d.cleanup()


async def test_forget_ends_an_agent_that_had_not_announced_itself(skyd_home: Path) -> None:
    """A launch that died while its agent was starting (no agent.json yet) is cleaned up
    by `forget`/`down`: the agent must not outlive its sandbox."""
    import skyd.clouds.local  # noqa: F401 - registers the `local` infra
    from skyd.clouds.base import get_cloud
    from skyd.nodeagent.client import start_agent_detached_blocking

    prov = get_cloud("local").provisioner()
    nd = skyd_home / "local" / "half" / "node-0"
    nd.mkdir(parents=True)
    info = await anyio.to_thread.run_sync(
        lambda: start_agent_detached_blocking(nd, cluster_secret="tok", cluster="half"))
    try:
        (nd / "agent.json").unlink()  # as if the daemon died before the agent wrote it
        from skyd.clouds.base import PartialHandle

        await prov.forget(PartialHandle("half", "local", None, None, "half"))
        with anyio.fail_after(10):
            while _alive(int(info["pid"])):
                await anyio.sleep(0.05)
        assert not (skyd_home / "local" / "half").exists()
    finally:
        if _alive(int(info["pid"])):
            os.kill(int(info["pid"]), signal.SIGKILL)


async def test_a_resumed_jobs_launch_never_creates_the_job_twice(skyd_home: Path) -> None:
    from skyd.daemon.registry import VERBS
    from skyd.jobs import verbs as _jobs_verbs  # noqa: F401 - registers jobs.launch
    from skyd.jobs.state import JobsDB

    assert VERBS["jobs.launch"].resumable
    store = await _store(skyd_home)
    db = await JobsDB.open(store.path, lock=store.write_lock)
    try:
        a = await db.create_job(name="j", dag_json="{}", strategy=None, request_key="jobs.launch:r1")
        b = await db.create_job(name="j", dag_json="{}", strategy=None, request_key="jobs.launch:r1")
        assert a == b and len(await db.list_jobs()) == 1
    finally:
        await db.close()
        await store.close()
