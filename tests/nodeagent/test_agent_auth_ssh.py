"""The agent's mutual TLS over an SSH pool (fake asyncssh hosts, the real zipapp agent):
fresh credentials per start, a kept agent keeps its own, a squatter on a dead agent's port is
found out through the port forward and the agent restarts on a new port."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import anyio
import pytest

from skyd.clouds.base import ProvisionRequest
from skyd.clouds.offering import Offering
from skyd.clouds.ssh.provisioner import SSHProvisioner, agent_site
from skyd.nodeagent.client import AgentClient
from skyd.transports import agent_deploy
from tests.fakes.sshhost import fake_hosts, make_keypair, write_pools

pytestmark = pytest.mark.anyio
CREDS = ("agent.crt", "agent.key", "ca.crt")


def _req(cluster: str) -> ProvisionRequest:
    return ProvisionRequest(cluster, 1, Offering("ssh", "", None, 0, 0, 0, "lab", None, 0.0, None), False)


class Squatter:
    """Listens on a port and records what every connection sends; never answers."""

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(8)
        self.received: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(c,), daemon=True).start()

    def _read(self, c: socket.socket) -> None:
        c.settimeout(5)
        data = b""
        try:
            while b := c.recv(65536):
                data += b
        except OSError:
            pass
        c.close()
        self.received.append(data)

    def close(self) -> None:
        self.sock.close()


async def test_ssh_agent_credentials_squatter_and_restart(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    async with fake_hosts(tmp_path, 1, pub) as (h,):
        write_pools(skyd_home.parent / "config", {"lab": [h]}, priv)
        p = SSHProvisioner()
        try:
            handle = await p.provision(_req("ta"), lambda m: None)
            node = handle.head
            nd = Path(node.node_dir)
            for name in (*CREDS, "agent.json"):
                assert (nd / name).stat().st_mode & 0o777 == 0o600, name
            key = (nd / "agent.key").read_bytes()

            # A running agent of this version is kept, with its own credentials.
            t = p._node_transport(node)
            info = await agent_deploy.start(t, agent_site(node, "ta"), handle.token, await p._zip())
            assert info["state"] == "running"
            assert (nd / "agent.key").read_bytes() == key
            assert not list(nd.glob(".next-*"))

            # Another cluster's client gets nothing through the forward.
            host, port = await p.agent_endpoint(handle, 0)
            async with AgentClient(host, port, "another-cluster") as c:
                assert await c.health() is False
            async with AgentClient(host, port, handle.token) as c:
                assert await c.health()

            # kill -9; a stranger takes the port; the repair pass finds out and restarts.
            old = json.loads((nd / "agent.json").read_text())
            os.kill(int(old["pid"]), signal.SIGKILL)
            time.sleep(0.3)
            squat = Squatter(int(old["port"]))
            try:
                assert await agent_deploy.healthy(t, agent_site(node, "ta"), handle.token, timeout=3) is False
                with anyio.fail_after(90):
                    handle = await p.ensure_agents(handle, lambda m: None)
                new = json.loads((nd / "agent.json").read_text())
                assert new["port"] != old["port"] and new["pid"] != old["pid"]
                assert (nd / "agent.key").read_bytes() != key
                host, port = await p.agent_endpoint(handle, 0)
                async with AgentClient(host, port, handle.token) as c:
                    assert await c.health()
            finally:
                squat.close()
            assert squat.received, "the health check never reached the old port"
            for data in squat.received:
                assert handle.token.encode() not in data
                assert data[:1] == b"\x16" and data[5:6] == b"\x01"  # a TLS ClientHello
            await p.terminate(handle, lambda m: None)
        finally:
            await p.close()
