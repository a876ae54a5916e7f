"""SSHTransport over fake SSH hosts: commands, SFTP, forwards, reconnect, host keys, auth."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import asyncssh
import pytest

from skyd.transports.ssh import (
    SSHCommandError,
    SSHConnectError,
    SSHTarget,
    SSHTransport,
    known_hosts_path,
)
from tests.fakes.sshhost import FakeSSHHost, make_keypair

pytestmark = pytest.mark.anyio


def _target(h: FakeSSHHost, key: Path) -> SSHTarget:
    return SSHTarget(h.host, h.port, "skyd", str(key))


async def test_run_commands_stdin_exit_codes(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub) as h, SSHTransport(_target(h, priv)) as t:
        r = await t.run(["printf", "%s|", "a b", "c'd"])
        assert r.stdout == "a b|c'd|" and r.exit_status == 0
        r = await t.run("cat; echo oops >&2; exit 3", input="from stdin\n")
        assert (r.exit_status, r.stdout, r.stderr) == (3, "from stdin\n", "oops\n")
        with pytest.raises(SSHCommandError, match="exited 3"):
            await t.run("exit 3", check=True)
        r = await t.run("echo $X", env={"X": "it's"})
        assert r.stdout == "it's\n"
        # many commands multiplexed on one connection, concurrently
        results: list[str] = []

        async def one(i: int) -> None:
            results.append((await t.run(f"echo {i}")).stdout.strip())

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(one, i)
        assert sorted(results, key=int) == [str(i) for i in range(20)]
        assert len(h._conns) == 1


async def test_sftp_put_and_private_write(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    src = tmp_path / "blob"
    src.write_bytes(b"x" * 300_000)
    async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub) as h, SSHTransport(_target(h, priv)) as t:
        await t.put(src, str(h.home / "blob"))
        assert (h.home / "blob").read_bytes() == src.read_bytes()
        await t.write_file(str(h.home / "token"), b"s3cret", mode=0o600)
        await t.write_file(str(h.home / "token"), b"s3cret2", mode=0o600)  # replace
        assert (h.home / "token").read_bytes() == b"s3cret2"
        assert (h.home / "token").stat().st_mode & 0o777 == 0o600
        assert not any("s3cret" in c for c in h.commands)  # never on a command line


async def _echo_server(tg: anyio.abc.TaskGroup) -> tuple[int, Any]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            async for chunk in stream:
                await stream.send(chunk.upper())

    tg.start_soon(listener.serve, handle)
    return listener.extra(anyio.abc.SocketAttribute.local_port), listener


async def _roundtrip(port: int, msg: bytes) -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port) as s:
        await s.send(msg)
        return await s.receive()


async def test_forward_and_reconnect_after_drop(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    async with anyio.create_task_group() as tg:
        remote_port, listener = await _echo_server(tg)
        async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub) as h, SSHTransport(_target(h, priv)) as t:
            local = await t.forward_local("127.0.0.1", remote_port)
            assert await t.forward_local("127.0.0.1", remote_port) == local
            assert await _roundtrip(local, b"hello") == b"HELLO"
            assert h.forwards_opened == 1
            h.drop_connections()
            await anyio.sleep(0.05)
            assert (await t.run("echo back")).stdout == "back\n"  # reconnected
            assert t.reconnects == 1
            # the forward came back on the same local port
            assert await t.forward_local("127.0.0.1", remote_port) == local
            assert await _roundtrip(local, b"again") == b"AGAIN"
        tg.cancel_scope.cancel()
    await listener.aclose()


async def test_host_key_tofu_then_changed_key_refused(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    port = 0
    async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub) as h:
        port = h.port
        async with SSHTransport(_target(h, priv)) as t:
            await t.run("true")
        recorded = known_hosts_path().read_text()
        assert f"[127.0.0.2]:{port} " in recorded and h.host_public_key.split()[1] in recorded
        async with SSHTransport(_target(h, priv)) as t:  # same key: accepted, not re-added
            await t.run("true")
        assert known_hosts_path().read_text() == recorded
    # same address and port, new host key (reinstalled host or a man in the middle)
    async with FakeSSHHost(tmp_path / "h2", "127.0.0.2", pub, port=port) as h2:
        t = SSHTransport(_target(h2, priv))
        with pytest.raises(SSHConnectError) as ei:
            await t.run("true")
        assert ei.value.kind == "hostkey" and "CHANGED" in str(ei.value)
        assert str(known_hosts_path()) in str(ei.value.hint)
        assert h2.commands == []


async def test_strict_mode_refuses_unknown_host(skyd_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    monkeypatch.setenv("SKYD_SSH_STRICT_HOST_KEYS", "1")
    async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub) as h:
        with pytest.raises(SSHConnectError) as ei:
            await SSHTransport(_target(h, priv)).run("true")
        assert ei.value.kind == "hostkey"


async def test_auth_failure_and_unreachable_are_clear(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    other, _ = make_keypair(tmp_path / "k2", "other")
    async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub) as h:
        with pytest.raises(SSHConnectError) as ei:
            await SSHTransport(_target(h, other), connect_attempts=3).run("true")
        assert ei.value.kind == "auth" and str(other) in str(ei.value)
        assert "authorized_keys" in str(ei.value.hint)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    t = SSHTransport(SSHTarget("127.0.0.1", dead, "skyd", str(priv)), connect_attempts=2, backoff_initial=0.01)
    with pytest.raises(SSHConnectError) as ei:
        await t.run("true")
    assert ei.value.kind == "unreachable" and f"127.0.0.1:{dead}" in str(ei.value)


async def test_ssh_command_for_rsync_uses_same_settings(skyd_home: Path, tmp_path: Path) -> None:
    """The OpenSSH client line (rsync -e) reaches the host with the same key and known_hosts."""
    priv, pub = make_keypair(tmp_path / "k")
    async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub) as h:
        tgt = _target(h, priv)
        async with SSHTransport(tgt) as t:  # records the host key (TOFU)
            await t.run("true")
        res = await anyio.run_process([*tgt.ssh_command(), h.host, "echo via-openssh"], check=False)
        assert res.stdout == b"via-openssh\n", res.stderr
        assert isinstance(asyncssh.__version__, str)
