"""Agents die; their jobs' processes must not outlive them, and the daemon notices.

A real daemon, real node agents on `local`, the real CLI (plus a node agent on a small
tmpfs for the disk-full case, skipped where mounting is not permitted). One daemon serves
the module's tests that take ``daemon``; what each leaves is taken down after it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import cli, wait_for
from tests.support.pipeline import Env

SHARED_DAEMON_ENV: dict[str, str] = {
    "SKYD_JOBS_POLL": "0.3",
    "SKYD_JOBS_BACKOFF": "0.3",
}  # the tests taking `daemon` share one (tests/support/plugin.py)


@pytest.fixture
def skyd_home(shared: Env) -> Path:
    return shared.home


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _kill_agent(home: Path, cluster: str) -> int:
    pid = int(json.loads((home / "local" / cluster / "node-0" / "agent.json").read_text())["pid"])
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not _alive(pid), timeout=10)
    return pid


def _launch_sleeper(home: Path, cluster: str) -> int:
    """A detached job that records its pid and sleeps; returns that pid once it runs."""
    r = cli("launch", "-y", "-d", "-c", cluster, "echo started; echo $$ > ~/job.pid; sleep 300")
    assert r.returncode == 0, r.stderr
    pidfile = home / "local" / cluster / "node-0" / "home" / "job.pid"
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=30)
    return int(pidfile.read_text())


def test_down_of_a_cluster_whose_agent_died_ends_the_jobs_processes(daemon: Any, skyd_home: Path) -> None:
    job = _launch_sleeper(skyd_home, "ad")
    _kill_agent(skyd_home, "ad")
    assert _alive(job)  # jobs run in their own sessions: the agent's death leaves them
    r = cli("down", "-y", "ad", timeout=120)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: not _alive(job), timeout=10)
    assert not (skyd_home / "local" / "ad").exists()


def test_logs_and_cancel_restart_a_dead_agent_and_say_so(daemon: Any, skyd_home: Path) -> None:
    job = _launch_sleeper(skyd_home, "dl")
    old = _kill_agent(skyd_home, "dl")
    r = cli("logs", "--no-follow", "dl", "1")
    assert r.returncode == 0, r.stderr
    assert "internal error" not in r.stderr
    assert "was not running; restarted it" in r.stdout + r.stderr
    assert "started" in r.stdout
    new = int(json.loads((skyd_home / "local/dl/node-0/agent.json").read_text())["pid"])
    assert new != old and _alive(new)
    assert _alive(job)  # the restarted agent adopted the running job
    r = cli("queue", "-o", "json", "dl")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["jobs"][0]["status"] == "RUNNING"
    r = cli("cancel", "-y", "dl", "1")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: not _alive(job), timeout=15)
    r = cli("queue", "-o", "json", "dl")
    assert json.loads(r.stdout)[0]["jobs"][0]["status"] == "CANCELLED"


def test_max_restarts_on_errors_restarts_on_local(daemon: Any, skyd_home: Path, tmp_path: Path) -> None:
    """A recovery pins the location it ran in: that must work on `local` too (it used to
    end FAILED_PRECHECKS: "infra 'local' takes no region, got 'local/local'")."""
    f = tmp_path / "rs.yaml"
    f.write_text(
        "name: rs\nresources:\n  job_recovery:\n    max_restarts_on_errors: 1\n"
        "run: |\n  if [ -f ~/ran-once ]; then echo second-run; exit 0; fi\n"
        "  touch ~/ran-once; exit 3\n"
    )
    r = cli("jobs", "launch", "-d", "-o", "json", str(f))
    assert r.returncode == 0, r.stderr
    jid = int(json.loads(r.stdout)["job_id"])
    from skyd import sdk

    row = wait_for(lambda: (j := sdk.get(f"/v1/jobs/{jid}"))["status"] in
                   ("SUCCEEDED", "FAILED", "FAILED_PRECHECKS", "FAILED_CONTROLLER") and j,
                   timeout=90, interval=0.2)  # fmt: skip
    assert row["status"] == "SUCCEEDED", row
    assert row["restarts"] == 1


def test_missing_workdir_or_mount_source_fails_before_provisioning(
    daemon: Any, skyd_home: Path, tmp_path: Path
) -> None:
    r = cli("launch", "-y", "-c", "mw", "--workdir", str(tmp_path / "nope"), "echo hi")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "workdir" in r.stderr and "internal error" not in r.stderr
    f = tmp_path / "fm.yaml"
    f.write_text(f"file_mounts:\n  ~/data: {tmp_path / 'missing'}\nrun: echo hi\n")
    r = cli("launch", "-y", "-c", "mf", str(f))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "file_mounts" in r.stderr and "does not exist" in r.stderr
    rows = json.loads(cli("status", "-o", "json").stdout)
    assert [x["name"] for x in rows if x["name"] in ("mw", "mf")] == []
    assert not (skyd_home / "local" / "mw").exists() and not (skyd_home / "local" / "mf").exists()


# -- storage -------------------------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (root only; skipped where mounting is not permitted)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                       capture_output=True)  # fmt: skip
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(path: Path) -> None:
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def test_full_disk_and_read_only_database_are_named(small_fs: Path, tmp_path: Path) -> None:
    from skyd.daemon.http import internal_error_dict

    db = small_fs / "state.db"
    c = sqlite3.connect(str(db))
    c.execute("CREATE TABLE t (x BLOB)")
    c.commit()
    _fill(small_fs / "fill")
    with pytest.raises(sqlite3.OperationalError) as e:
        for _ in range(100):
            c.execute("INSERT INTO t VALUES (?)", (b"x" * 65536,))
            c.commit()
    c.close()
    err = internal_error_dict(e.value, "daemon.log")
    from skyd.daemon.store import storage_error

    named = storage_error(e.value, db)
    assert named is not None and str(db) in str(named) and "disk full" in str(named)
    assert "internal error" not in err["message"] and "disk full" in err["message"]
    ro = tmp_path / "ro.db"
    sqlite3.connect(str(ro)).execute("CREATE TABLE t (x)").connection.commit()
    c = sqlite3.connect(f"file:{ro}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as e2:
        c.execute("INSERT INTO t VALUES (1)")
    named = storage_error(e2.value, ro)
    assert named is not None and f"state database is read-only: {ro}" in str(named)


def test_job_that_ends_while_the_disk_is_full_does_not_stay_running(small_fs: Path) -> None:
    """The agent's state writes fail while the disk is full; once space returns the job
    must reach a final state (it stayed RUNNING forever)."""
    import anyio

    from skyd.nodeagent.client import AgentClient, start_agent_detached_blocking

    home = small_fs / "node"
    home.mkdir()
    info = start_agent_detached_blocking(home, cluster_secret="tok", cluster="df")
    fill = small_fs / "fill"
    spec = {"name": "df", "run": f"head -c 4000000 /dev/zero > {fill} 2>/dev/null; exit 0",
            "setup": "", "envs": {}, "workdir": "", "gpus": 0, "cpus": 0, "num_nodes": 1,
            "nodes": [{"rank": 0, "address": f"127.0.0.1:{info['port']}"}]}  # fmt: skip

    async def main() -> str:
        async with AgentClient("127.0.0.1", int(info["port"]), "tok") as c:
            jid = await c.submit_job(spec)
            await anyio.sleep(3.0)  # the job ended with the disk full
            fill.unlink()
            deadline = time.monotonic() + 20
            status = ""
            while time.monotonic() < deadline:
                try:
                    status = [j for j in await c.job_queue() if int(j["job_id"]) == jid][0]["status"]
                except Exception:  # noqa: BLE001 - the agent may be catching up
                    status = "?"
                if status in ("SUCCEEDED", "FAILED", "FAILED_DRIVER"):
                    return status
                await anyio.sleep(0.3)
            return status

    try:
        status = anyio.run(main)
        assert status in ("SUCCEEDED", "FAILED", "FAILED_DRIVER"), status
    finally:
        if _alive(int(info["pid"])):
            os.kill(int(info["pid"]), signal.SIGKILL)


def test_managed_job_whose_agent_died_recovers_without_running_twice(
    daemon: Any, skyd_home: Path, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    f = tmp_path / "mj.yaml"
    f.write_text(f"name: mj\nrun: |\n  echo $$ >> {pids}\n  sleep 300\n")
    r = cli("jobs", "launch", "-d", "-o", "json", str(f))
    assert r.returncode == 0, r.stderr
    jid = int(json.loads(r.stdout)["job_id"])
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 1, timeout=60)
    first = int(pids.read_text().split()[0])
    _kill_agent(skyd_home, f"skyd-jobs-{jid}-0")
    wait_for(lambda: len(pids.read_text().split()) == 2, timeout=90, interval=0.2)
    second = int(pids.read_text().split()[1])
    assert not _alive(first), "the first copy still runs beside the recovered one"
    assert _alive(second)
    # Cancelling the recovered job ends it CANCELLED and leaves nothing; the daemon lives
    # (it used to exit: an exception escaped its root task group).
    r = cli("jobs", "cancel", "-y", str(jid))
    assert r.returncode == 0, r.stderr
    from skyd import sdk

    row = wait_for(lambda: (j := sdk.get(f"/v1/jobs/{jid}"))["status"] in
                   ("CANCELLED", "FAILED", "FAILED_CONTROLLER") and j, timeout=60, interval=0.2)  # fmt: skip
    assert row["status"] == "CANCELLED", row
    wait_for(lambda: not _alive(second), timeout=15)
    wait_for(lambda: not (skyd_home / "local" / f"skyd-jobs-{jid}-0").exists(), timeout=30)
    time.sleep(1.0)  # a crash after the row is written would show here
    assert daemon.proc.poll() is None, daemon.proc.stderr.read().decode()
    r = cli("status", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert [x["name"] for x in json.loads(r.stdout) if x["name"].startswith("skyd-jobs-")] == []


@pytest.mark.anyio
async def test_agent_connection_lost_mid_call_does_not_leave_a_pending_cancel() -> None:
    """grpclib wakes a call whose connection died with a native Task.cancel() it never
    takes back; left pending, the next cancel scope cancelled in that task could not absorb
    its cancellation, which then ended the daemon's root task group (`jobs cancel` after an
    agent died made the daemon exit)."""
    import anyio

    from skyd.nodeagent.client import AgentClient
    from tests.fakes.hangup import hang_up_server

    async with hang_up_server() as port:
        with anyio.CancelScope() as scope:
            with pytest.raises(Exception) as e:  # noqa: PT011 - whatever grpclib says
                async with AgentClient("127.0.0.1", port, "tok") as c:
                    await c.job_queue()
            assert not isinstance(e.value, anyio.get_cancelled_exc_class())
            scope.cancel()
            await anyio.sleep(1)
        assert scope.cancelled_caught
