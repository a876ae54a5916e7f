"""Cancel in every phase, the launch scheduler, resume after a daemon stop, queue reads."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from skyd.jobs.manager import JobsManager, resume_all
from skyd.jobs.scheduler import LaunchScheduler
from skyd.jobs.sim import SimClusterOps
from skyd.jobs.state import JobsDB
from tests.jobs.test_jobs_harness import fast_config, harness

pytestmark = pytest.mark.anyio


async def test_cancel_during_starting_running_and_recovering(tmp_path: Path) -> None:
    sim = SimClusterOps(launch_delay=0.3)
    async with harness(tmp_path, sim=sim) as h:
        starting = await h.submit({"outcomes": ["hang"]})
        await h.until(lambda r: r["status"] == "STARTING", starting)
        assert await h.m.cancel(ids=[starting]) == [starting]
        r1 = await h.finish(starting)

        sim.launch_delay = 0.0
        running = await h.submit({"outcomes": ["hang"]})
        await h.until(lambda r: r["status"] == "RUNNING", running)
        await h.m.cancel(ids=[running])
        r2 = await h.finish(running)

        recovering = await h.submit({"outcomes": ["hang"]}, retry_until_up=True)
        await h.until(lambda r: r["status"] == "RUNNING", recovering)
        sim.refuse_capacity()
        sim.preempt([f"skyd-jobs-{recovering}-0"])
        await h.until(lambda r: r["status"] == "RECOVERING", recovering)
        await anyio.sleep(0.05)
        await h.m.cancel(ids=[recovering])
        r3 = await h.finish(recovering)
        atts = await h.db.attempts(running)
    assert (r1["status"], r2["status"], r3["status"]) == ("CANCELLED",) * 3
    assert r1["schedule_state"] == r2["schedule_state"] == "DONE"
    assert atts[-1]["status"] == "CANCELLED"
    assert sim.live_clusters() == [] and sim.violations == []


async def test_cancel_by_name_all_and_errors(tmp_path: Path) -> None:
    from skyd.errors import InvalidSpecError, NotFoundError

    async with harness(tmp_path) as h:
        a = await h.submit({"outcomes": ["hang"]}, name="a")
        b = await h.submit({"outcomes": ["hang"]}, name="b")
        c = await h.submit({"outcomes": ["hang"]}, name="b")
        assert sorted(await h.m.cancel(name="b")) == [b, c]
        with pytest.raises(NotFoundError):
            await h.m.cancel(ids=[999])
        with pytest.raises(InvalidSpecError):
            await h.m.cancel()
        assert await h.m.cancel(all_jobs=True) == [a]
        for j in (a, b, c):
            assert (await h.finish(j))["status"] == "CANCELLED"
        assert await h.m.cancel(all_jobs=True) == []
        rows = await h.m.queue(statuses=["cancelled"])
        assert len(rows) == 3 and json.dumps(rows)
        assert await h.m.queue(skip_finished=True) == []
        with pytest.raises(InvalidSpecError, match="unknown status"):
            await h.m.queue(statuses=["BOGUS"])


async def test_scheduler_orders_by_priority_then_submit_time() -> None:
    s = LaunchScheduler(1)
    order: list[int] = []

    async def want(jid: int, prio: int, t: float) -> None:
        async with s.slot(jid, prio, t):
            order.append(jid)
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        async with s.slot(0, 0, 0.0):
            for jid, prio, t in [(1, 0, 1.0), (2, 5, 3.0), (3, 5, 2.0), (4, -1, 0.5), (5, 0, 0.9)]:
                tg.start_soon(want, jid, prio, t)
            await anyio.sleep(0.05)
            assert s.waiting == 5
    assert order == [3, 2, 5, 1, 4] and s.peak == 1


async def test_scheduler_cancelled_waiter_frees_nothing_it_did_not_hold() -> None:
    s = LaunchScheduler(1)
    async with anyio.create_task_group() as tg:
        async with s.slot(0, 0, 0.0):
            with anyio.move_on_after(0.02):
                async with s.slot(1, 0, 1.0):
                    pytest.fail("must not be granted")
            tg.start_soon(lambda: anyio.sleep(0))
        assert s.in_use == 0
        async with s.slot(2, 0, 2.0):
            assert s.in_use == 1


async def test_launch_bound_is_respected_with_many_jobs(tmp_path: Path) -> None:
    sim = SimClusterOps(launch_delay=0.05, default_duration=0.05)
    async with harness(tmp_path, sim=sim, max_concurrent_launches=3) as h:
        ids = [await h.submit({}, priority=i % 3) for i in range(12)]
        rows = [await h.finish(j) for j in ids]
    assert {r["status"] for r in rows} == {"SUCCEEDED"} and {r["schedule_state"] for r in rows} == {"DONE"}
    assert h.m.scheduler.peak == 3


async def test_resume_reattaches_without_relaunching(tmp_path: Path) -> None:
    sim = SimClusterOps(default_duration=0.6)
    db = await JobsDB.open(tmp_path / "jobs.db")
    cfg = fast_config()
    try:
        async with anyio.create_task_group() as tg:  # daemon #1
            m = JobsManager(db, sim, lambda n, f, *a: tg.start_soon(f, *a), cfg)
            jid = await m.submit([{"name": "t", "sim": {}}])
            with anyio.fail_after(5):
                while (await db.get_job(jid) or {})["status"] != "RUNNING":
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()  # daemon stops; the cluster keeps running
        assert (await db.get_job(jid) or {})["status"] == "RUNNING"
        async with anyio.create_task_group() as tg:  # daemon #2
            m2 = await resume_all(db, sim, lambda n, f, *a: tg.start_soon(f, *a), cfg)
            with anyio.fail_after(5):
                assert await m2.wait(jid) == "SUCCEEDED"
        assert sim.launches == 1 and sim.live_clusters() == []
        assert len(await db.attempts(jid)) == 1
    finally:
        await db.close()
