"""Slurm as infra against a real slurmctld + two slurmd on loopback (tests/fakes/slurm.py),
reached through a real OpenSSH login host. Needs root, slurm-wlm, munge, openssh-server."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.slurm import SlurmFixture, unavailable_reason
from tests.test_ssh_e2e_support import cli, cluster_row, daemon

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmFixture]:
    # sshd and slurmd read files here as the test user: not under pytest's 0700 tmp
    root = Path(tempfile.mkdtemp(prefix="skyd-slurm-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    fx = SlurmFixture(root)
    try:
        fx.start()
    except (RuntimeError, OSError) as e:
        fx.stop()
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"slurm tier: the fixture could not start: {e}")
    try:
        yield fx
    finally:
        fx.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cfg(slurm: SlurmFixture, skyd_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmFixture]:
    conf = skyd_home.parent / "slurm_config"
    conf.write_text(slurm.slurm_config())
    monkeypatch.setenv("SKYD_SLURM_CONFIG", str(conf))
    yield slurm
    left = slurm.squeue()
    slurm.cancel_all()
    assert left == [], f"left in squeue: {left}"


async def test_launch_exec_queue_logs_down(cfg: SlurmFixture) -> None:
    async with daemon():
        r = await cli("launch", "-y", "-c", "s1", "--infra", "slurm/loop/gpu", "--gpus", "MI300X:1",
                      "echo first-$((6*7)) rocr=$ROCR_VISIBLE_DEVICES hip=$HIP_VISIBLE_DEVICES", timeout=180)
        assert r.returncode == 0, r
        assert "first-42 rocr=" in r.stdout and "hip=0" in r.stdout, r
        assert len(cfg.squeue()) == 1
        r = await cli("exec", "s1", "echo again-$SKYPILOT_NODE_RANK")
        assert r.returncode == 0 and "again-0" in r.stdout, r
        r = await cli("queue", "s1")
        assert r.returncode == 0 and "SUCCEEDED" in r.stdout, r
        r = await cli("logs", "s1", "1", "--no-follow")
        assert r.returncode == 0 and "first-42" in r.stdout, r
        r = await cli("status", "-r", "-o", "json")
        row = cluster_row(r.json(), "s1")
        assert row["status"] == "UP", r
        r = await cli("down", "-y", "s1", timeout=120)
        assert r.returncode == 0, r
    assert cfg.squeue() == []
    assert await _leftovers(cfg) == []
    assert not (cfg.home / ".skyd" / "nodes").exists() or not list((cfg.home / ".skyd" / "nodes").iterdir())


async def _leftovers(fx: SlurmFixture, wait_s: float = 10.0) -> list[str]:
    """The test user's processes still alive after ``down`` (its closing ssh sessions aside)."""
    import anyio

    out: list[str] = []
    with anyio.move_on_after(wait_s):
        while True:
            out = []
            for pid in fx.user_pids():
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                if not cmd.startswith("sshd"):
                    out.append(f"{pid} {cmd[:200]}")
            if not out:
                return out
            await anyio.sleep(0.2)
    return out
