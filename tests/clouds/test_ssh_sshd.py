"""One end-to-end run against real OpenSSH (CI tier; skipped without /usr/sbin/sshd)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from skyd.clouds.base import NODE_RUNNING, ProvisionRequest
from skyd.clouds.offering import Offering
from skyd.transports.ssh import SSHTarget, SSHTransport
from skyd.transports.sync import sync_to_remote
from tests.fakes.sshd import real_sshd, unavailable_reason

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]


async def test_real_sshd_transport_sync_and_agent(skyd_home: Path, tmp_path: Path) -> None:
    import tempfile

    from skyd.clouds.ssh.provisioner import SSHProvisioner
    from skyd.nodeagent.client import AgentClient

    work = Path(tempfile.mkdtemp(prefix="skyd-sshd-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    try:
        async with real_sshd(work) as s:
            target = SSHTarget(s.host, s.port, s.user, str(s.key))
            async with SSHTransport(target) as t:
                r = await t.run("id -un; echo $HOME")
                assert r.stdout.split() == [s.user, str(s.home)]
                src = tmp_path / "wd"
                (src / "d").mkdir(parents=True)
                (src / "d" / "x.txt").write_text("x" * 10)
                (src / "skip.log").write_text("no")
                for method in ("sftp", "rsync") if shutil.which("rsync") else ("sftp",):
                    st = await sync_to_remote(t, src, f"{s.home}/wd-{method}", ["*.log"], method=method)
                    assert (st.files, st.bytes) == (1, 10)
                    r = await t.run(f"cat {s.home}/wd-{method}/d/x.txt; ls {s.home}/wd-{method}")
                    assert r.stdout == "x" * 10 + "d\n"
            cfg = skyd_home.parent / "config"
            cfg.mkdir(parents=True, exist_ok=True)
            (cfg / "ssh_node_pools.yaml").write_text(
                f"real:\n  user: {s.user}\n  identity_file: {s.key}\n  hosts:\n"
                f"    - ip: {s.host}\n      port: {s.port}\n"
            )
            p = SSHProvisioner()
            try:
                off = Offering("ssh", "", None, 0, 0, 0, "real", None, 0.0, None)
                handle = await p.provision(ProvisionRequest("real1", 1, off, False), lambda m: None)
                host, port = await p.agent_endpoint(handle, 0)
                async with AgentClient(host, port, handle.token) as c:
                    assert await c.health()
                assert await p.query(handle) == [NODE_RUNNING]
                await p.terminate(handle, lambda m: None)
                async with SSHTransport(target) as t:
                    assert (await t.run("test -e ~/.skyd && echo left || echo clean")).stdout == "clean\n"
            finally:
                await p.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize(("offered", "used"), [
    (None, "aes256-gcm@openssh.com"),  # OpenSSH's defaults: AES-GCM, the cheaper one in asyncssh
    ("chacha20-poly1305@openssh.com", "chacha20-poly1305@openssh.com"),  # a server's own pick
])
async def test_the_cipher_is_aes_gcm_where_the_server_offers_it(
        skyd_home: Path, tmp_path: Path, offered: str | None, used: str) -> None:
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="skyd-sshd-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    try:
        async with real_sshd(work, ciphers=offered) as s:
            async with SSHTransport(SSHTarget(s.host, s.port, s.user, str(s.key))) as t:
                assert (await t.run("echo ok")).stdout == "ok\n"
                conn = t._conn
                assert conn is not None
                assert (conn.get_extra_info("send_cipher"), conn.get_extra_info("recv_cipher")) == (used, used)
    finally:
        shutil.rmtree(work, ignore_errors=True)
