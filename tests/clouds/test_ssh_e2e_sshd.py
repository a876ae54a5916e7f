"""One `skyd launch --infra ssh/real` through the daemon against real OpenSSH (CI tier:
needs root and /usr/sbin/sshd; see tests/fakes/sshd.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from skyd.clouds.ssh.state import allocations_sync
from tests.fakes.sshd import real_sshd, unavailable_reason
from tests.support.ssh_e2e import cli, cluster_row, daemon

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]


async def test_launch_exec_down_on_real_sshd(skyd_home: Path, tmp_path: Path) -> None:
    # sshd reads the authorized keys as the test user: the dir must be traversable by it,
    # and /tmp is 0700 on some machines (containers); /var/tmp is 1777 by convention.
    work = Path(tempfile.mkdtemp(prefix="skyd-sshd-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "in.txt").write_text("from-workdir")
    try:
        async with real_sshd(work) as s:
            cfg = skyd_home.parent / "config"
            cfg.mkdir(parents=True, exist_ok=True)
            (cfg / "ssh_node_pools.yaml").write_text(
                f"real:\n  user: {s.user}\n  identity_file: {s.key}\n  hosts:\n"
                f"    - ip: {s.host}\n      port: {s.port}\n"
            )
            async with daemon():
                r = await cli("launch", "-y", "-c", "real", "--infra", "ssh/real", "--workdir", str(wd),
                              "cat in.txt; echo \" user=$(id -un) ips=$SKYPILOT_NODE_IPS\"")  # fmt: skip
                assert r.returncode == 0, r
                assert f"from-workdir user={s.user} ips={s.host}" in r.stdout, r
                assert allocations_sync() == {f"{s.user}@{s.host}:{s.port}": "real"}
                r = await cli("exec", "real", "echo again")
                assert r.returncode == 0 and "again" in r.stdout, r
                r = await cli("status", "-r", "-o", "json")
                assert cluster_row(r.json(), "real")["status"] == "UP", r
                r = await cli("down", "-y", "real")
                assert r.returncode == 0, r
                assert allocations_sync() == {}
                assert not (s.home / ".skyd").exists()
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def test_launch_exec_logs_down_on_real_sshd_without_tcp_forwarding(skyd_home: Path, tmp_path: Path) -> None:
    """sshd with ``AllowTcpForwarding no``: the agent is reached through the exec relay."""
    work = Path(tempfile.mkdtemp(prefix="skyd-sshd-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    try:
        async with real_sshd(work, allow_tcp_forwarding=False) as s:
            cfg = skyd_home.parent / "config"
            cfg.mkdir(parents=True, exist_ok=True)
            (cfg / "ssh_node_pools.yaml").write_text(
                f"locked:\n  user: {s.user}\n  identity_file: {s.key}\n  hosts:\n"
                f"    - ip: {s.host}\n      port: {s.port}\n"
            )
            async with daemon():
                r = await cli("launch", "-y", "-c", "locked", "--infra", "ssh/locked",
                              "echo relayed-$((6*7))")  # fmt: skip
                assert r.returncode == 0, r
                assert "relayed-42" in r.stdout, r
                r = await cli("exec", "locked", "echo again")
                assert r.returncode == 0 and "again" in r.stdout, r
                r = await cli("logs", "locked", "1", "--no-follow")
                assert r.returncode == 0 and "relayed-42" in r.stdout, r
                r = await cli("status", "-r", "-o", "json")
                assert cluster_row(r.json(), "locked")["status"] == "UP", r
                r = await cli("down", "-y", "locked")
                assert r.returncode == 0, r
                assert allocations_sync() == {}
                assert not (s.home / ".skyd").exists()
    finally:
        shutil.rmtree(work, ignore_errors=True)
