"""MOUNT on an SSH pool node (real OpenSSH, a non-root test user; CI tier like
tests/clouds/test_ssh_e2e_sshd.py): where the user can use /dev/fuse the bucket is mounted and
unmounted at down; where it cannot, the launch names the node and /dev/fuse."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from tests.fakes.awsproxy import start_moto
from tests.fakes.sshd import real_sshd, unavailable_reason
from tests.support.aws import CREDS, REGION
from tests.support.ssh_e2e import cli, daemon

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(unavailable_reason() is not None or shutil.which("rclone") is None,
                       reason=str(unavailable_reason() or "rclone is not installed")),
]


def _fuse_for_users() -> bool:
    try:
        mode = os.stat("/dev/fuse").st_mode
    except OSError:
        return False
    return bool(mode & stat.S_IROTH and mode & stat.S_IWOTH)


async def test_mount_on_ssh_node(skyd_home: Path, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    server, url = start_moto()
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=url,
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    s3.create_bucket(Bucket="skyd-sshmnt")
    s3.put_object(Bucket="skyd-sshmnt", Key="hello.txt", Body=b"over-ssh\n")
    for k, v in {**CREDS, "AWS_ENDPOINT_URL": url}.items():
        monkeypatch.setenv(k, v)
    work = Path(tempfile.mkdtemp(prefix="skyd-sshd-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    y = tmp_path / "m.yaml"
    y.write_text("file_mounts:\n  ~/b:\n    source: s3://skyd-sshmnt\n    mode: MOUNT\n"
                 "run: cat ~/b/hello.txt && echo from-node > ~/b/back.txt\n")
    try:
        async with real_sshd(work) as s:
            cfg = skyd_home.parent / "config"
            cfg.mkdir(parents=True, exist_ok=True)
            (cfg / "ssh_node_pools.yaml").write_text(
                f"real:\n  user: {s.user}\n  identity_file: {s.key}\n  hosts:\n"
                f"    - ip: {s.host}\n      port: {s.port}\n")
            async with daemon():
                r = await cli("launch", "-y", "-c", "smnt", "--infra", "ssh/real", str(y),
                              timeout=180)
                if _fuse_for_users():
                    assert r.returncode == 0, r
                    assert "over-ssh" in r.stdout, r
                    assert s3.get_object(Bucket="skyd-sshmnt", Key="back.txt")["Body"].read() \
                        == b"from-node\n"
                else:  # /dev/fuse is root's only here: the node is named, and what to fix
                    assert r.returncode != 0, r
                    assert f"{s.user}@{s.host}" in r.stderr and "/dev/fuse" in r.stderr, r
                assert "testing" not in r.stdout + r.stderr
                r = await cli("down", "-y", "smnt", timeout=120)
                assert r.returncode == 0, r
                with open("/proc/self/mounts") as f:
                    assert not [ln for ln in f if str(s.home) in ln and " fuse" in ln]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        server.stop()
