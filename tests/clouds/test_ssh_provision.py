"""SSHProvisioner end to end over fake SSH hosts with the real agent zipapp."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import anyio
import pytest

from skyd.clouds.base import (
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    NODE_UNKNOWN,
    ProvisionRequest,
)
from skyd.clouds.offering import Offering
from skyd.clouds.ssh.provisioner import SSHProvisioner
from skyd.clouds.ssh.state import allocations_sync
from skyd.errors import ResourcesUnavailableError
from skyd.nodeagent.client import AgentClient
from skyd.transports.agent_deploy import agent_zipapp
from tests.fakes.sshhost import FakeSSHHost, fake_hosts, make_keypair, write_pools

pytestmark = pytest.mark.anyio


def offering(pool: str, host: str | None = None) -> Offering:
    return Offering("ssh", host or "", None, 0, 0, 0, pool, None, 0.0, None)


def req(cluster: str, n: int, pool: str = "lab") -> ProvisionRequest:
    return ProvisionRequest(cluster, n, offering(pool), False)


async def test_deploy_health_stop_start_terminate(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    logs: list[str] = []
    async with fake_hosts(tmp_path, 1, pub, gpu="h100x8") as (h,):
        write_pools(skyd_home.parent / "config", {"lab": [h]}, priv)
        p = SSHProvisioner()
        try:
            handle = await p.provision(req("c1", 1), logs.append)
            node = handle.head
            assert handle.accelerators == {"H100": 8.0} and handle.hourly_cost == 0.0
            assert allocations_sync() == {node.instance_id: "c1"}
            nd = Path(node.node_dir)
            assert not (nd / "token").exists()  # the cluster secret stays in the daemon
            for name in ("agent.crt", "agent.key", "ca.crt", "agent.json"):
                assert (nd / name).stat().st_mode & 0o777 == 0o600, name
            assert not any(handle.token in f.read_text(errors="replace")
                           for f in nd.rglob("*") if f.is_file() and f.suffix != ".db")
            assert not any(handle.token in c for c in h.commands)
            assert not any(handle.token in line for line in logs)
            info = json.loads((Path(node.node_dir) / "agent.json").read_text())
            assert info["port"] == node.agent_port
            host, port = await p.agent_endpoint(handle, 0)
            assert port != node.agent_port or host == "127.0.0.1"
            async with AgentClient(host, port, handle.token) as c:
                assert await c.health()
                st = await c.status()
                assert st["cluster"] == "c1" and len(st["gpus"]) == 8
            assert await p.query(handle) == [NODE_RUNNING]
            await p.stop(handle, logs.append)
            assert await p.query(handle) == [NODE_STOPPED]
            assert allocations_sync() == {node.instance_id: "c1"}  # stop keeps the host
            await p.start(handle, logs.append)
            assert await p.query(handle) == [NODE_RUNNING]
            await p.terminate(handle, logs.append)
            assert await p.query(handle) == [NODE_TERMINATED]
            assert allocations_sync() == {}
            assert not (h.home / ".skyd").exists()  # node dir and zipapp removed
            await p.terminate(handle, logs.append)  # idempotent
        finally:
            await p.close()


async def test_upgrade_keeps_job_queue_and_ensure_restarts_killed_agent(
    skyd_home: Path, tmp_path: Path
) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    old = tmp_path / "old.pyz"
    from skyd.nodeagent.zipapp import build_zipapp

    old_sha = await anyio.to_thread.run_sync(lambda: build_zipapp(old, interpreter="/usr/bin/python3"))
    async with fake_hosts(tmp_path, 1, pub) as (h,):
        write_pools(skyd_home.parent / "config", {"lab": [h]}, priv)
        p_old = SSHProvisioner(zipapp=(old, old_sha))
        handle = await p_old.provision(req("c2", 1), lambda m: None)
        host, port = await p_old.agent_endpoint(handle, 0)
        async with AgentClient(host, port, handle.token) as c:
            job_id = await c.submit_job({"run": "echo hi", "name": "j1"})
        await p_old.close()
        old_pid = json.loads((Path(handle.head.node_dir) / "agent.json").read_text())["pid"]
        new_path, new_sha = await agent_zipapp()
        assert new_sha != old_sha
        p = SSHProvisioner()
        try:
            logs: list[str] = []
            handle = await p.ensure_agents(handle, logs.append)
            assert handle.head.extra["sha"] == new_sha and any("upgraded" in m for m in logs)
            info = json.loads((Path(handle.head.node_dir) / "agent.json").read_text())
            assert info["pid"] != old_pid
            host, port = await p.agent_endpoint(handle, 0)
            async with AgentClient(host, port, handle.token) as c:
                jobs = await c.job_queue()
            assert [j["job_id"] for j in jobs] == [job_id]  # queue survived the upgrade
            # kill -9 the agent: query says not running, ensure_agents brings it back
            os.kill(info["pid"], signal.SIGKILL)
            await anyio.sleep(0.2)
            assert await p.query(handle) == [NODE_UNKNOWN]  # killed, not stopped on purpose
            handle = await p.ensure_agents(handle, lambda m: None)
            assert await p.query(handle) == [NODE_RUNNING]
            await p.terminate(handle, lambda m: None)
            assert not (h.home / ".skyd").exists()
        finally:
            await p.close()


async def test_multi_node_listens_on_internal_ips(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    async with fake_hosts(tmp_path, 3, pub) as hosts:
        write_pools(skyd_home.parent / "config", {"lab": hosts}, priv)
        p = SSHProvisioner()
        try:
            handle = await p.provision(req("mn", 2), lambda m: None)
            assert [n.internal_ip for n in handle.nodes] == ["127.0.0.2", "127.0.0.3"]
            for n in handle.nodes:  # the head can reach each worker directly, with the token
                async with AgentClient(n.internal_ip, n.agent_port, handle.token) as c:
                    assert await c.health()
            with pytest.raises(ResourcesUnavailableError, match="1 free host"):
                await p.provision(req("other", 2), lambda m: None)
            await p.terminate(handle, lambda m: None)
            assert allocations_sync() == {}
        finally:
            await p.close()


async def test_host_without_python_fails_cleanly(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    async with (
        FakeSSHHost(tmp_path / "a", "127.0.0.2", pub) as good,
        FakeSSHHost(tmp_path / "b", "127.0.0.3", pub, missing=["python3"]) as bad,
    ):
        write_pools(skyd_home.parent / "config", {"lab": [good, bad]}, priv)
        p = SSHProvisioner()
        try:
            with pytest.raises(ResourcesUnavailableError) as ei:
                await p.provision(req("np", 2), lambda m: None)
            assert "127.0.0.3" in str(ei.value) and "python3" in str(ei.value)
            assert "install python3" in str(ei.value.hint)
            assert allocations_sync() == {}  # released
            assert not (good.home / ".skyd").exists()  # nothing left half-installed
        finally:
            await p.close()


async def test_sync_dir_paths(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    src = tmp_path / "wd"
    src.mkdir()
    (src / "a.py").write_text("a")
    async with fake_hosts(tmp_path, 1, pub) as (h,):
        write_pools(skyd_home.parent / "config", {"lab": [h]}, priv)
        p = SSHProvisioner()
        try:
            handle = await p.provision(req("sd", 1), lambda m: None)
            assert await p.sync_dir(handle, 0, str(src), "workdir", []) == (1, 1)
            assert (Path(handle.head.node_dir) / "workdir" / "a.py").read_text() == "a"
            assert await p.sync_dir(handle, 0, str(src / "a.py"), "~/data/a.py", []) == (1, 1)
            assert (h.home / "data" / "a.py").exists()
            await p.terminate(handle, lambda m: None)
        finally:
            await p.close()
