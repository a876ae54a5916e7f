"""stop / start / autostop / down, and faults: agent killed with -9, daemon killed with -9
mid-launch. Real daemon (restarted here), real agents, real CLI."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyd.sdk.transport import Client
from tests.support.pipeline import Env, module_env, wait_for, write


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with module_env(tmp_path_factory) as e:
        yield e


def _agent_pid(env: Env, cluster: str, rank: int = 0) -> int:
    info = json.loads((env.cluster_dir(cluster) / f"node-{rank}" / "agent.json").read_text())
    return int(info["pid"])


def _refresh(names: list[str]) -> list[dict[str, object]]:
    with Client(autostart=False) as c:
        return list(c.post("/v1/status/refresh", {"clusters": names}))


def test_stop_start_keeps_history(env: Env) -> None:
    env.ok("launch", "-c", "pf-stop", "echo one")
    env.ok("exec", "pf-stop", "echo two")
    pid = _agent_pid(env, "pf-stop")
    env.ok("stop", "pf-stop", "-y")
    row = env.status("pf-stop")
    assert row is not None and row["status"] == "STOPPED"
    assert env.agent_pids("pf-stop") == []
    r = env.ok("queue", "pf-stop")  # the mirror answers while stopped
    assert "SUCCEEDED" in r.stdout
    env.ok("start", "pf-stop", "-y")
    row = env.status("pf-stop")
    assert row is not None and row["status"] == "UP"
    assert env.agent_pids("pf-stop") and _agent_pid(env, "pf-stop") != pid
    assert [j["job_id"] for j in env.queue("pf-stop")] == [2, 1]
    r = env.ok("exec", "pf-stop", "echo three")
    assert "Job 3 on pf-stop" in r.stderr


def test_autostop_stop_then_down(env: Env) -> None:
    import skyd.sdk as sdk

    env.ok("launch", "-c", "pf-auto", "echo a")
    rid = sdk.submit("autostop", {"clusters": ["pf-auto"], "idle_minutes": 0.05})
    sdk.get_result(rid)
    assert env.status("pf-auto")["autostop_minutes"] == pytest.approx(0.05)  # type: ignore[index]
    # The agent stops itself after 3 s idle; the refresher (SKYD_REFRESH_S=1) shows it.
    wait_for(lambda: (env.status("pf-auto") or {}).get("status") == "STOPPED", timeout=20, interval=0.3)
    assert env.agent_pids("pf-auto") == []
    env.ok("start", "pf-auto", "-y")
    rid = sdk.submit("autostop", {"clusters": ["pf-auto"], "idle_minutes": 0.05, "down": True})
    sdk.get_result(rid)
    wait_for(lambda: env.status("pf-auto") is None, timeout=20, interval=0.3)
    assert not env.cluster_dir("pf-auto").exists()
    assert env.agent_pids("pf-auto") == []


def test_launch_down_flag_tears_down(env: Env, tmp_path: Path) -> None:
    r = env.ok("launch", "-c", "pf-dflag", "--down", "echo bye")
    assert "bye" in r.stdout
    assert env.status("pf-dflag") is None
    assert not env.cluster_dir("pf-dflag").exists() and env.agent_pids("pf-dflag") == []
    # Detached: the agent's autostop (idle 0, down) fires once the job is done, not before.
    m = tmp_path / "m"
    env.ok("launch", "-c", "pf-dflag2", "-d", "--down", f"sleep 1.5; echo late > {m}")
    wait_for(lambda: env.status("pf-dflag2") is None, timeout=15, interval=0.3)
    assert m.read_text() == "late\n"  # the job ran to its end before the teardown
    wait_for(lambda: env.status("pf-dflag2") is None, timeout=15, interval=0.3)
    assert not env.cluster_dir("pf-dflag2").exists() and env.agent_pids("pf-dflag2") == []


def test_agent_kill9_unhealthy_then_refresh(env: Env) -> None:
    env.ok("launch", "-c", "pf-agent", "echo up")
    env.ok("exec", "pf-agent", "-d", "sleep 2; echo job-done")
    env.wait_job("pf-agent", 2, {"RUNNING"})
    pid = _agent_pid(env, "pf-agent")
    os.kill(pid, signal.SIGKILL)
    # The daemon's refresher (every 1 s here) sees the dead agent: INIT, unhealthy.
    row = wait_for(lambda: (r := env.status("pf-agent")) and r["status"] == "INIT" and r,
                   timeout=15, interval=0.3)
    assert "unhealthy" in row["status_reason"]
    out = _refresh(["pf-agent"])  # what `skyd status -r` does
    assert out and out[0]["status"] == "UP"
    assert _agent_pid(env, "pf-agent") != pid
    # The restarted agent re-adopts the running job (or marks it FAILED_DRIVER): never lost.
    j = env.wait_job("pf-agent", 2, {"SUCCEEDED", "FAILED_DRIVER"}, timeout=20)
    if j["status"] == "SUCCEEDED":
        assert "job-done" in env.ok("logs", "pf-agent", "2", "--no-follow").stdout
    r = env.ok("exec", "pf-agent", "echo after")
    assert "after" in r.stdout and "Job 3" in r.stderr


def test_daemon_kill9_mid_launch_resumes(env: Env, tmp_path: Path) -> None:
    y = write(tmp_path / "slow.yaml", "setup: sleep 2\nrun: echo resumed-ok\n")
    with Client(autostart=False) as c:
        rid = c.submit("launch", {"yaml": y.read_text(), "yaml_path": str(y),
                                  "base_dir": str(tmp_path), "cluster_name": "pf-crash"})
        # Kill the daemon while the job's setup sleeps.
        wait_for(lambda: any(e.get("type") == "stage" and e.get("name") == "SETUP"
                             for e in c.events(rid, False)), timeout=20, interval=0.1)
    env.kill9_daemon()
    agents = env.agent_pids("pf-crash")
    assert len(agents) == 1  # the detached agent survives the daemon
    env.start_daemon()
    with Client(autostart=False) as c:
        evs = list(c.events(rid, True))
    assert evs[-1]["type"] == "result", evs[-3:]
    assert evs[-1]["result"]["job_id"] == 1 and evs[-1]["result"]["status"] == "SUCCEEDED"
    assert [j["job_id"] for j in env.queue("pf-crash")] == [1]  # not submitted twice
    assert env.agent_pids("pf-crash") == agents  # no second (orphan) agent
    assert "resumed-ok" in env.ok("logs", "pf-crash", "1", "--no-follow").stdout


def test_down_and_down_all(env: Env) -> None:
    env.ok("launch", "-c", "pf-down1", "echo a")
    env.ok("launch", "-c", "pf-down2", "--num-nodes", "2", "echo b")
    pids = env.agent_pids("pf-down1") + env.agent_pids("pf-down2")
    assert len(pids) == 3
    env.ok("down", "pf-down1", "-y")
    assert env.agent_pids("pf-down1") == [] and not env.cluster_dir("pf-down1").exists()
    env.ok("down", "-a", "-y")
    assert env.json("status") == []
    assert list((env.home / "local").iterdir()) == []
    # Gone by the time `down` returns (a zombie not yet reaped by the daemon counts as gone).
    assert env.agent_pids("pf-down2") == []
    for p in pids:
        stat = Path(f"/proc/{p}/stat")
        assert not stat.exists() or stat.read_text().split(")")[-1].split()[0] == "Z"
