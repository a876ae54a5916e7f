"""Managed-job controller against SimClusterOps: recovery, restarts, failures, pipelines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from skyd.jobs.ops import Block, TaskSpec
from skyd.jobs.sim import SimClusterOps
from skyd.jobs.strategies import RecoveryStrategy, Step, register_recovery_strategy
from tests.jobs.test_jobs_harness import harness

pytestmark = pytest.mark.anyio


async def test_preempted_job_recovers_in_another_region_and_succeeds(tmp_path: Path) -> None:
    async with harness(tmp_path, sim=SimClusterOps(launch_delay=0.05)) as h:
        jid = await h.submit({"duration": 0.2, "outcomes": ["preempt", "ok"]}, name="train")
        seen: set[str] = set()

        async def watch() -> None:
            while True:
                row = await h.db.get_job(jid)
                assert row
                seen.add(row["status"])
                if row["status"] == "SUCCEEDED":
                    return
                await anyio.sleep(0.003)

        await watch()
        row = await h.finish(jid)
        atts = await h.db.attempts(jid)
    assert row["status"] == "SUCCEEDED" and row["recoveries"] == 1 and row["restarts"] == 0
    assert {"RUNNING", "RECOVERING"} <= seen
    assert [a["status"] for a in atts] == ["PREEMPTED", "SUCCEEDED"]
    assert atts[0]["region"] == "r1" and atts[1]["region"] == "r2"  # EAGER_NEXT_REGION
    assert atts[0]["reason"].startswith("preempted")
    # ids the user's code sees are the same on both attempts
    envs = [e[5] for e in h.sim.launch_log]
    assert len(envs) == 2 and envs[0] == envs[1]
    assert envs[0]["SKYPILOT_MANAGED_JOB_ID"] == str(jid) == envs[0]["SKYD_MANAGED_JOB_ID"]
    assert envs[0]["SKYPILOT_TASK_ID"].endswith(f"_train_{jid}-0")
    assert h.sim.live_clusters() == [] and h.sim.violations == []


async def test_manual_preemption_with_failover_stays_in_region(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        jid = await h.submit({"duration": 0.4}, job_recovery="FAILOVER")
        await h.until(lambda r: r["status"] == "RUNNING", jid)
        assert h.sim.preempt([f"skyd-jobs-{jid}-0"])
        row = await h.finish(jid)
        atts = await h.db.attempts(jid)
    assert row["status"] == "SUCCEEDED" and row["recoveries"] == 1
    assert [a["region"] for a in atts] == ["r1", "r1"]


async def test_user_failure_without_restarts_fails_with_exit_code(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        jid = await h.submit({"duration": 0.05, "outcomes": ["exit:3", "ok"]})
        row = await h.finish(jid)
    assert row["status"] == "FAILED" and row["exit_code"] == 3 and row["restarts"] == 0
    assert "exit code 3" in row["failure_reason"]
    assert h.sim.live_clusters() == []


async def test_user_failure_restarts_until_budget(tmp_path: Path) -> None:
    jr = {"job_recovery": {"max_restarts_on_errors": 2}}
    async with harness(tmp_path) as h:
        ok = await h.submit({"duration": 0.05, "outcomes": ["exit:3", "exit:3", "ok"]}, resources=jr)
        bad = await h.submit({"duration": 0.05, "outcomes": ["exit:4"]}, resources=jr)
        r_ok, r_bad = await h.finish(ok), await h.finish(bad)
        atts = await h.db.attempts(ok)
    assert r_ok["status"] == "SUCCEEDED" and r_ok["restarts"] == 2 and r_ok["recoveries"] == 0
    assert [a["status"] for a in atts] == ["FAILED", "FAILED", "SUCCEEDED"]
    assert [a["exit_code"] for a in atts] == [3, 3, 0]
    assert r_bad["status"] == "FAILED" and r_bad["restarts"] == 2 and r_bad["exit_code"] == 4


async def test_recover_on_exit_codes_always_recovers_uncounted(tmp_path: Path) -> None:
    jr = {"job_recovery": {"strategy": "FAILOVER", "recover_on_exit_codes": [33]}}
    async with harness(tmp_path) as h:
        jid = await h.submit({"duration": 0.05, "outcomes": ["exit:33", "exit:33", "ok"]}, resources=jr)
        row = await h.finish(jid)
    assert row["status"] == "SUCCEEDED" and row["restarts"] == 0 and row["recoveries"] == 2


async def test_setup_failure_and_precheck(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        jid = await h.submit({"duration": 0.05, "outcomes": ["setup_fail"]})
        row = await h.finish(jid)
        h.sim.precheck_error = "credentials for fakecloud are missing"
        jid2 = await h.submit({"duration": 0.05})
        row2 = await h.finish(jid2)
    assert row["status"] == "FAILED_SETUP"
    assert row2["status"] == "FAILED_PRECHECKS" and "credentials" in row2["failure_reason"]
    assert h.sim.live_clusters() == []


async def test_capacity_failover_then_no_resource(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        h.sim.refuse_capacity(region="r1")
        h.sim.fail_next_provisions(1)  # r2-a fails once: lands in r2-b
        a = await h.submit({"duration": 0.05})
        ra = await h.finish(a)
        atts = await h.db.attempts(a)
        h.sim.refuse_capacity()  # everything
        b = await h.submit({"duration": 0.05})
        rb = await h.finish(b)
    assert ra["status"] == "SUCCEEDED" and atts[0]["zone"] == "r2-b"
    assert rb["status"] == "FAILED_NO_RESOURCE" and "retry-until-up" not in rb["failure_reason"]
    assert h.sim.live_clusters() == []


async def test_retry_until_up_waits_for_capacity(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        h.sim.refuse_capacity()
        jid = await h.submit({"duration": 0.05}, retry_until_up=True)
        await h.until(lambda r: r["schedule_state"] == "WAITING" and r["status"] == "STARTING", jid)
        h.sim.restore_capacity()
        row = await h.finish(jid)
    assert row["status"] == "SUCCEEDED"


async def test_recovery_with_everything_blocked_fails_no_resource(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        jid = await h.submit({"duration": 0.5})
        await h.until(lambda r: r["status"] == "RUNNING", jid)
        h.sim.refuse_capacity()
        h.sim.preempt([f"skyd-jobs-{jid}-0"])
        row = await h.finish(jid)
    assert row["status"] == "FAILED_NO_RESOURCE" and row["recoveries"] == 1
    assert h.sim.live_clusters() == []


async def test_pipeline_runs_tasks_in_order(tmp_path: Path) -> None:
    docs: list[dict[str, Any]] = [
        {"name": "pipe"},
        {"name": "prep", "run": "x", "sim": {"duration": 0.05}},
        {"name": "train", "run": "y", "sim": {"duration": 0.05, "outcomes": ["preempt", "ok"]}},
    ]
    async with harness(tmp_path) as h:
        jid = await h.m.submit(docs)
        row = await h.finish(jid)
        atts = await h.db.attempts(jid)
        two: list[dict[str, Any]] = [
            {"name": "a", "sim": {"duration": 0.05}},
            {"name": "b", "sim": {"duration": 0.05, "outcomes": ["exit:2"]}},
        ]
        bad = await h.m.submit(two)
        rbad = await h.finish(bad)
    assert row["status"] == "SUCCEEDED" and row["name"] == "pipe" and row["current_task"] == 1
    assert [(a["task_index"], a["status"]) for a in atts] == [(0, "SUCCEEDED"), (1, "PREEMPTED"), (1, "SUCCEEDED")]
    assert [e[0] for e in h.sim.launch_log][:3] == [f"skyd-jobs-{jid}-0", f"skyd-jobs-{jid}-1", f"skyd-jobs-{jid}-1"]
    assert rbad["status"] == "FAILED" and rbad["current_task"] == 1
    assert h.sim.live_clusters() == []


class PinR3(RecoveryStrategy):
    name = "PIN_R3"

    def recovery_steps(self, spec: TaskSpec, last: Block | None) -> list[Step]:
        return [Step(pin=Block("fakecloud", "r3", None))]


async def test_custom_strategy_plugs_in(tmp_path: Path) -> None:
    register_recovery_strategy("PIN_R3", PinR3)
    async with harness(tmp_path) as h:
        jid = await h.submit({"duration": 0.1, "outcomes": ["preempt", "ok"]}, job_recovery="pin_r3")
        row = await h.finish(jid)
        atts = await h.db.attempts(jid)
    assert row["status"] == "SUCCEEDED" and row["strategy"] == "PIN_R3"
    assert [a["region"] for a in atts] == ["r1", "r3"]


async def test_unknown_strategy_is_a_user_error(tmp_path: Path) -> None:
    from skyd.errors import InvalidSpecError

    async with harness(tmp_path) as h:
        with pytest.raises(InvalidSpecError, match="unknown recovery strategy"):
            await h.submit({}, job_recovery="NOPE")
        assert await h.db.list_jobs() == []


class _LostConnectionOps(SimClusterOps):
    """Job-status calls go through a real grpclib call whose connection is lost first
    (tests.fakes.hangup): it leaves a native cancel request on the controller's task."""

    lossy: set[str] = set()  # the clusters whose calls lose their connection

    async def job_status(self, cluster_name: str, job_id: int) -> Any:
        from tests.fakes.hangup import lose_a_grpc_connection

        if cluster_name in self.lossy:
            await lose_a_grpc_connection()
        return await super().job_status(cluster_name, job_id)


async def test_a_controller_failure_ends_its_job_failed_controller_not_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The cancel's cancellation cannot be absorbed by the controller's scope: that job
    ends FAILED_CONTROLLER with the traceback logged; the task group and the other job go on."""
    async with harness(tmp_path, sim=_LostConnectionOps(default_duration=0.6)) as h:
        bad = await h.submit({"duration": 30})
        h.sim.lossy.add(f"skyd-jobs-{bad}-0")  # type: ignore[attr-defined]
        await h.until(lambda r: r["status"] == "RUNNING", bad)
        ok = await h.submit({"duration": 0.6})
        await anyio.sleep(0.3)
        assert await h.m.cancel(ids=[bad]) == [bad]
        r_bad, r_ok = await h.finish(bad), await h.finish(ok)
    assert r_bad["status"] == "FAILED_CONTROLLER", r_bad
    assert "controller error: CancelledError" in r_bad["failure_reason"]
    assert r_ok["status"] == "SUCCEEDED", r_ok
    assert f"managed job {bad}: controller error:\nTraceback" in caplog.text
