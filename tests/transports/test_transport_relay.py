"""The agent's byte stream on SSH hosts that refuse TCP forwarding: an exec relay to the
agent's Unix socket, chosen when the first direct-tcpip channel is refused and remembered
for the host. Fake hosts are real asyncssh servers; agents are the real zipapp."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import anyio
import pytest

from skyd.clouds.base import NODE_RUNNING, NODE_STOPPED, NODE_TERMINATED, ProvisionRequest
from skyd.clouds.offering import Offering
from skyd.clouds.ssh.provisioner import SSHProvisioner
from skyd.nodeagent.client import AgentClient
from skyd.transports import agent_deploy
from skyd.transports import ssh as ssh_transport
from skyd.transports.agent_deploy import AgentSite
from skyd.transports.base import AgentAddress
from skyd.transports.local import LocalTransport
from skyd.transports.ssh import SSHTarget, SSHTransport
from tests.fakes.sshd import real_sshd
from tests.fakes.sshd import unavailable_reason as sshd_unavailable
from tests.fakes.sshhost import fake_hosts, make_keypair, write_pools

pytestmark = pytest.mark.anyio


def _req(cluster: str, n: int = 1) -> ProvisionRequest:
    return ProvisionRequest(cluster, n, Offering("ssh", "", None, 0, 0, 0, "lab", None, 0.0, None), False)


async def _logs(c: AgentClient, job_id: int) -> str:
    return b"".join([chunk async for chunk in c.tail_logs(job_id, follow=True)]).decode()


async def test_no_forwarding_host_runs_jobs_and_logs_through_the_relay(
    skyd_home: Path, tmp_path: Path
) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    async with fake_hosts(tmp_path, 1, pub, allow_forwarding=False) as (h,):
        write_pools(skyd_home.parent / "config", {"lab": [h]}, priv)
        p = SSHProvisioner()
        try:
            handle = await p.provision(_req("nofwd"), lambda m: None)
            node = handle.head
            info = json.loads((Path(node.node_dir) / "agent.json").read_text())
            assert info["socket"] == node.extra["agent_socket"]
            assert Path(info["socket"]).is_socket()
            assert Path(info["socket"]).stat().st_mode & 0o777 == 0o600
            host, port = await p.agent_endpoint(handle, 0)
            async with AgentClient(host, port, handle.token) as c:
                assert await c.health()
                job = await c.submit_job({"run": "echo relayed-$((6*7)); echo line2", "name": "j"})
                assert await _logs(c, job) == "relayed-42\nline2\n"
                assert [j["status"] for j in await c.job_queue()] == ["SUCCEEDED"]
            assert h.forwards_refused == 1 and h.forwards_opened == 0  # probed once
            assert (await p.agent_endpoint(handle, 0)) == (host, port)  # one relay per agent
            async with AgentClient(host, port, handle.token) as c:  # a second connection
                assert await c.health()
            relay = p._node_transport(node)._relays[info["socket"]]
            assert relay.connections == 2 and relay.spares_used == 1  # it got the pre-opened pipe
            assert await p.query(handle) == [NODE_RUNNING]
            await p.stop(handle, lambda m: None)
            assert await p.query(handle) == [NODE_STOPPED]
            await p.start(handle, lambda m: None)
            # the agent was restarted: a spare pipe to the old one is not handed out
            assert await p.query(handle) == [NODE_RUNNING]
            async with AgentClient(host, port, handle.token) as c:
                assert await c.health()
            await p.terminate(handle, lambda m: None)
            assert await p.query(handle) == [NODE_TERMINATED]
            assert not (h.home / ".skyd").exists()
        finally:
            await p.close()
        # A new transport to the same host (e.g. after a daemon reconnect) does not ask again.
        t = SSHTransport(SSHTarget(h.host, h.port, "skyd", str(priv)))
        try:
            assert t.target.key in ssh_transport.NO_FORWARDING
            await t.agent_endpoint(AgentAddress("127.0.0.1", 1, "/nonexistent.sock"))
            assert t.forwarding is False and h.forwards_refused == 1
        finally:
            await t.close()


async def test_forwarding_host_keeps_the_port_forward(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    async with fake_hosts(tmp_path, 1, pub) as (h,):
        write_pools(skyd_home.parent / "config", {"lab": [h]}, priv)
        p = SSHProvisioner()
        try:
            handle = await p.provision(_req("fwd"), lambda m: None)
            host, port = await p.agent_endpoint(handle, 0)
            async with AgentClient(host, port, handle.token) as c:
                assert await c.health()
            assert h.forwards_refused == 0 and h.forwards_opened >= 2  # the probe, then the forward
            assert not any("skyd relay" in c or "AF_UNIX" in c for c in h.commands)
            await p.terminate(handle, lambda m: None)
        finally:
            await p.close()


async def test_relay_reports_an_agent_that_is_gone(skyd_home: Path, tmp_path: Path) -> None:
    """A relay whose agent socket is missing drops the connection: health says False
    (the repair pass then restarts the agent), nothing hangs."""
    priv, pub = make_keypair(tmp_path / "k")
    async with fake_hosts(tmp_path, 1, pub, allow_forwarding=False) as (h,):
        t = SSHTransport(SSHTarget(h.host, h.port, "skyd", str(priv)))
        try:
            site = AgentSite(str(h.home / "gone"), str(h.home), 0, "c", port=9)
            with anyio.fail_after(20):
                assert await agent_deploy.healthy(t, site, "token") is False
            assert t.forwarding is False
        finally:
            await t.close()


async def test_local_transport_runs_copies_and_reaches_the_agent(tmp_path: Path) -> None:
    t = LocalTransport(tmp_path)
    res = await t.run(["sh", "-c", "echo $X; pwd"], env={"X": "it's"})
    assert res.ok and res.stdout.split("\n")[:2] == ["it's", str(tmp_path)]
    await t.write_file(str(tmp_path / "secret"), b"s3", mode=0o600)
    assert (tmp_path / "secret").stat().st_mode & 0o777 == 0o600
    await t.put(tmp_path / "secret", str(tmp_path / "sub" / "copy"))
    await t.get(str(tmp_path / "sub" / "copy"), tmp_path / "back")
    assert (tmp_path / "back").read_bytes() == b"s3"
    assert await t.agent_endpoint(AgentAddress("127.0.0.1", 4321, None)) == ("127.0.0.1", 4321)


@pytest.mark.skipif(sshd_unavailable() is not None, reason=str(sshd_unavailable()))
async def test_real_sshd_relays_more_connections_than_max_sessions(skyd_home: Path, tmp_path: Path) -> None:
    """OpenSSH caps the sessions of one connection (MaxSessions 10): 14 log followers at once
    through the relay still all get their stream (relays spread over extra connections)."""
    work = Path(tempfile.mkdtemp(prefix="skyd-sshd-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    try:
        async with real_sshd(work, allow_tcp_forwarding=False) as s:
            cfg = skyd_home.parent / "config"
            cfg.mkdir(parents=True, exist_ok=True)
            (cfg / "ssh_node_pools.yaml").write_text(
                f"lab:\n  user: {s.user}\n  identity_file: {s.key}\n  hosts:\n"
                f"    - ip: {s.host}\n      port: {s.port}\n"
            )
            p = SSHProvisioner()
            handle = await p.provision(_req("ms"), lambda m: None)
            try:
                host, port = await p.agent_endpoint(handle, 0)
                async with AgentClient(host, port, handle.token) as c:
                    job = await c.submit_job({"run": "echo start; sleep 3; echo end", "name": "j"})
                outs: dict[int, str] = {}

                async def follow(i: int) -> None:
                    async with AgentClient(host, port, handle.token) as c:
                        outs[i] = await _logs(c, job)

                with anyio.fail_after(60):
                    async with anyio.create_task_group() as tg:
                        for i in range(14):
                            tg.start_soon(follow, i)
                assert outs == {i: "start\nend\n" for i in range(14)}
            finally:
                with anyio.CancelScope(shield=True):
                    await p.terminate(handle, lambda m: None)  # nothing left on the test user's home
                    await p.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
