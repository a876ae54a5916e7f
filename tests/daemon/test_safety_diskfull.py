"""A full disk is an error message, not a dead daemon: SKYD_HOME on a small tmpfs (made by
the test, as root) that a job's output fills. The daemon keeps answering, the job's log stops
growing with a marker, nothing is orphaned; a daemon started on a full disk still serves
`status`, `logs` and `down`; the reserve comes back by itself when space does."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.crash_harness import daemon_and_helpers, leftover_pids
from tests.support.daemon import DaemonProc, cli, wait_for

JOB = """resources:
  infra: local
run: |
  for i in $(seq 1 500); do head -c 20000 /dev/zero | tr '\\0' x; echo; sleep 0.01; done
  echo END-OF-JOB
"""


@pytest.fixture
def small_fs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs for SKYD_HOME")
    base = Path(tempfile.mkdtemp(prefix="skyd-full-", dir="/tmp"))
    mnt = base / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    monkeypatch.setenv("SKYD_HOME", str(mnt / "home"))
    monkeypatch.setenv("SKYD_SOCKET", str(base / "s.sock"))
    monkeypatch.setenv("SKYD_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("SKYD_DISK_RESERVE", str(512 * 1024))
    monkeypatch.setenv("SKYD_NO_AUTOSTART", "1")
    try:
        yield mnt
    finally:
        for pid in leftover_pids(base):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        time.sleep(0.3)
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        subprocess.run(["rm", "-rf", str(base)], capture_output=True)


def fill(path: Path) -> None:
    """Fill the filesystem up (a file of zeros until ENOSPC)."""
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def test_a_job_filling_the_disk_leaves_the_daemon_serving(small_fs: Path,
                                                          tmp_path: Path) -> None:
    home = small_fs / "home"
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    d = DaemonProc().start()
    try:
        r = cli("launch", "-y", "-c", "full", str(job), timeout=180)
        # The CLI gets an answer, not a broken stream (exit 7); a failure says where.
        assert r.returncode != 7, r.stderr[-2000:]
        if r.returncode != 0:
            assert "disk full at" in r.stderr, r.stderr[-2000:]
        assert d.proc is not None and d.proc.poll() is None, "the daemon died"
        st = cli("status", "-o", "json")
        assert st.returncode == 0 and '"full"' in st.stdout, st.stderr
        # The agent cuts the job's log on its next tick (the launch may have ended first, its
        # own request log being what filled up): the marker shows up while the job runs.
        def cut() -> bool:
            logs = cli("logs", "full", "1", "--no-follow", timeout=60)
            assert logs.returncode == 0, logs.stderr
            return "disk full at" in logs.stdout and "output after this point dropped" in logs.stdout

        wait_for(cut, timeout=60, interval=1.0)
        log_files = list((home / "local" / "full" / "node-0" / "jobs").rglob("rank-0.log"))
        assert log_files and log_files[0].stat().st_size < 2 * 1024 * 1024  # stopped growing
        down = cli("down", "-y", "full", timeout=120)
        assert down.returncode == 0, down.stderr
        assert not (home / "local" / "full").exists()
        assert not set(leftover_pids(small_fs)) - daemon_and_helpers(d.pid), "an agent was orphaned"
        # space is back (the job's log went with the cluster): the reserve is made again
        wait_for(lambda: (home / "run" / "reserve").exists(), timeout=15)
    finally:
        d.terminate()
        d.cleanup()


def test_a_daemon_starts_on_a_full_disk_and_recovers(small_fs: Path, tmp_path: Path) -> None:
    home = small_fs / "home"
    d = DaemonProc().start()
    try:
        r = cli("launch", "-y", "-c", "deg", "--infra", "local", "echo hello-deg", timeout=120)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: (home / "run" / "reserve").exists(), timeout=15)
        d.kill9()
        filler = small_fs / "filler"
        fill(filler)
        d = DaemonProc().start()  # degraded: the reserve is released first
        assert cli("status").returncode == 0
        logs = cli("logs", "deg", "1", "--no-follow")
        assert logs.returncode == 0 and "hello-deg" in logs.stdout, logs.stderr
        down = cli("down", "-y", "deg", timeout=120)
        assert down.returncode == 0, down.stderr
        assert not (home / "local" / "deg").exists()
        filler.unlink()
        wait_for(lambda: (home / "run" / "reserve").exists(), timeout=15)
        r = cli("launch", "-y", "-c", "deg2", "--infra", "local", "echo back", timeout=120)
        assert r.returncode == 0 and "back" in r.stdout, r.stderr
        assert cli("down", "-y", "deg2", timeout=120).returncode == 0
    finally:
        d.terminate()
        d.cleanup()
