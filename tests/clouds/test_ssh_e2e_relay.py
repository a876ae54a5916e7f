"""`skyd launch/exec/logs/down` end to end on SSH hosts that refuse TCP forwarding (sshd
``AllowTcpForwarding no``): the daemon reaches the agents through the exec relay. Fake hosts
are asyncssh servers that reject direct-tcpip; the daemon and the CLI are the real ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyd.clouds.ssh.state import allocations_sync
from tests.fakes.sshhost import fake_hosts, make_keypair, write_pools
from tests.support.ssh_e2e import cli, cluster_row, daemon, node_dirs

pytestmark = pytest.mark.anyio


async def test_launch_exec_logs_down_without_tcp_forwarding(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "in.txt").write_text("from-workdir")
    async with fake_hosts(tmp_path, 2, pub, allow_forwarding=False) as hosts:
        write_pools(skyd_home.parent / "config", {"locked": hosts}, priv)
        async with daemon():
            r = await cli("launch", "-y", "-c", "nf", "--infra", "ssh/locked", "--workdir", str(wd),
                          "cat in.txt; echo ' relayed'")  # fmt: skip
            assert r.returncode == 0, r
            assert "from-workdir relayed" in r.stdout, r
            r = await cli("exec", "nf", "echo exec-$((40+2))")
            assert r.returncode == 0 and "exec-42" in r.stdout, r
            r = await cli("logs", "nf", "1", "--no-follow")
            assert r.returncode == 0 and "from-workdir relayed" in r.stdout, r
            r = await cli("status", "-r", "-o", "json")
            assert cluster_row(r.json(), "nf")["status"] == "UP", r
            r = await cli("down", "-y", "nf")
            assert r.returncode == 0, r
            # two nodes: the head agent gang-starts the worker over the cluster network
            r = await cli("launch", "-y", "-c", "nf2", "--num-nodes", "2", "--infra", "ssh/locked",
                          "echo rank-$SKYPILOT_NODE_RANK")  # fmt: skip
            assert r.returncode == 0 and "rank-0" in r.stdout and "rank-1" in r.stdout, r
            r = await cli("down", "-y", "nf2")
            assert r.returncode == 0, r
        assert allocations_sync() == {}
        for h in hosts:
            assert not node_dirs(h.home) and not (h.home / ".skyd").exists()
            assert h.forwards_opened == 0 and h.forwards_refused >= 1


async def test_a_host_refusing_forwards_with_connect_failed_is_relayed(skyd_home: Path,
                                                                     tmp_path: Path) -> None:
    """A server that refuses direct-tcpip with OPEN_CONNECT_FAILED (asyncssh-based servers,
    some bastions) while the agent is healthy by exec: skyd switches to the exec relay and
    remembers it, instead of dying on the first gRPC call (StreamTerminatedError)."""
    import asyncssh

    priv, pub = make_keypair(tmp_path / "k")
    async with fake_hosts(tmp_path, 1, pub, allow_forwarding=False,
                          refusal_code=asyncssh.OPEN_CONNECT_FAILED) as hosts:
        write_pools(skyd_home.parent / "config", {"bastion": hosts}, priv)
        async with daemon():
            r = await cli("launch", "-y", "-c", "cf", "--infra", "ssh/bastion",
                          "echo via-$((6*7))")
            assert r.returncode == 0, r
            assert "via-42" in r.stdout, r
            r = await cli("exec", "cf", "echo again")
            assert r.returncode == 0 and "again" in r.stdout, r
            r = await cli("down", "-y", "cf")
            assert r.returncode == 0, r
        assert allocations_sync() == {}
        h = hosts[0]
        assert h.forwards_opened == 0 and h.forwards_refused >= 1
        assert not node_dirs(h.home)
