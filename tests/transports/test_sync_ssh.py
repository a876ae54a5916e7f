"""Sync over SSH to fake hosts: rsync vs SFTP, excludes, stats, dropped connection."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from skyd.transports.ssh import SSHTarget, SSHTransport
from skyd.transports.sync import sync_to_remote
from tests.fakes.sshhost import FakeSSHHost, make_keypair
from tests.transports.test_sync_local import EXPECTED, listing, make_tree

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("method", ["rsync", "sftp"])
async def test_sync_methods_agree(skyd_home: Path, tmp_path: Path, method: str) -> None:
    if method == "rsync" and not shutil.which("rsync"):
        pytest.skip("rsync not installed (apt-get install rsync)")
    priv, pub = make_keypair(tmp_path / "k")
    src = tmp_path / "src"
    make_tree(src)
    async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub) as h:
        async with SSHTransport(SSHTarget(h.host, h.port, "skyd", str(priv))) as t:
            dst = str(h.home / "wd")
            st = await sync_to_remote(t, src, dst, None, method=method)
            assert st.method == method
            assert listing(h.home / "wd") == EXPECTED
            assert (st.files, st.bytes) == (4, sum((src / f).stat().st_size for f in EXPECTED))
            assert int((h.home / "wd/main.py").stat().st_mtime) == int((src / "main.py").stat().st_mtime)
            again = await sync_to_remote(t, src, dst, None, method=method)
            assert (again.files, again.bytes) == (0, 0)


async def test_auto_falls_back_to_sftp_without_remote_rsync(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    src = tmp_path / "src"
    make_tree(src)
    async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub, missing=["rsync"]) as h:
        async with SSHTransport(SSHTarget(h.host, h.port, "skyd", str(priv))) as t:
            st = await sync_to_remote(t, src, str(h.home / "wd"), None)
            assert st.method == "sftp" and listing(h.home / "wd") == EXPECTED


async def test_connection_dropped_mid_sync_is_retried(skyd_home: Path, tmp_path: Path) -> None:
    priv, pub = make_keypair(tmp_path / "k")
    src = tmp_path / "src"
    for i in range(400):
        p = src / f"d{i % 8}" / f"f{i}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"file {i}\n" * 20)
    async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub) as h:
        async with SSHTransport(SSHTarget(h.host, h.port, "skyd", str(priv))) as t:
            await t.run("true")
            h.drop_after_sftp_writes = 120  # abort the connection at the 120th file
            st = await sync_to_remote(t, src, str(h.home / "wd"), [], method="sftp")
            assert h.drops == 1 and t.reconnects >= 1
            assert listing(h.home / "wd") == listing(src)
            for f in ("d3/f3.txt", "d7/f399.txt"):
                assert (h.home / "wd" / f).read_text() == (src / f).read_text()
            # Files confirmed before the drop are counted; up to `parallel` (32) in-flight
            # puts may have landed unconfirmed and are then skipped as up to date.
            assert 400 - 32 <= st.files <= 400 + 32


async def test_sftp_channel_closed_before_a_put_is_retried(skyd_home: Path, tmp_path: Path) -> None:
    """The shared SFTP channel can close between two puts (the server ended it, the
    connection was cut): a request on it fails 'Connection not open', which is a lost
    connection to retry, not an error to report."""
    priv, pub = make_keypair(tmp_path / "k")
    src = tmp_path / "src"
    make_tree(src)
    async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub) as h:
        async with SSHTransport(SSHTarget(h.host, h.port, "skyd", str(priv))) as t:
            sftp = await t.sftp()
            sftp.exit()
            await sftp.wait_closed()
            st = await sync_to_remote(t, src, str(h.home / "wd"), None, method="sftp")
            assert listing(h.home / "wd") == EXPECTED and st.files == 4
