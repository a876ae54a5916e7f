"""skyd.storage.rclone without FUSE: what a node that cannot mount is told, and that the
secret stays in the config file (never on the mount command line)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from skyd.storage import rclone
from skyd.storage.mounts import BucketMount
from skyd.transports.base import NodeShell, RunResult, Transport, command_line


class ScriptedNode(Transport):
    """A node whose FUSE check answers ``word``; records every command and file."""

    def __init__(self, word: str) -> None:
        self.word = word
        self.commands: list[str] = []
        self.files: dict[str, tuple[bytes, int]] = {}

    async def run(self, cmd: str | Sequence[str], *, input: str | bytes | None = None,
                  check: bool = False, timeout: float | None = None,
                  env: dict[str, str] | None = None, idempotent: bool = False) -> RunResult:
        line = command_line(cmd, env)
        self.commands.append(line)
        if "/dev/fuse" in line:
            return RunResult(0, self.word + "\n", "")
        return RunResult(0, "MOUNTED\n", "")

    async def put(self, local: str | Path, remote: str) -> None:
        raise NotImplementedError

    async def get(self, remote: str, local: str | Path) -> None:
        raise NotImplementedError

    async def write_file(self, remote: str, data: bytes, *, mode: int = 0o600) -> None:
        self.files[remote] = (data, mode)

    async def agent_endpoint(self, addr: Any) -> tuple[str, int]:
        raise NotImplementedError


def _shell(t: Transport) -> NodeShell:
    return NodeShell(t, "/n/.skyd", "/n/home", label="c1 node 0 (box-a)")


@pytest.mark.parametrize(("word", "says"), [
    ("NO_FUSE", "/dev/fuse is not usable"),
    ("NO_RCLONE", "rclone is not installed"),
    ("NO_FUSERMOUNT", "fusermount3/fusermount is missing"),
])
def test_node_that_cannot_mount_is_named(word: str, says: str) -> None:
    m = BucketMount("~/d", "S3", "b1", "", mode="MOUNT")
    with pytest.raises(rclone.MountError) as ei:
        anyio.run(rclone.mount_on_node, _shell(ScriptedNode(word)), [m], "", lambda _m: None)
    msg = str(ei.value)
    assert "c1 node 0 (box-a)" in msg and says in msg, msg
    assert "COPY" in (ei.value.hint or "")


def test_install_is_said_and_secret_only_in_the_0600_file(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    node = ScriptedNode("INSTALLED")
    logs: list[str] = []
    mounts = [BucketMount("~/my data", "S3", "b1", "p/", mode="MOUNT"),
              BucketMount("/ck", "S3", "b2", "", mode="MOUNT_CACHED")]

    async def go() -> None:
        conf = await rclone.config_text({"S3"})
        await rclone.mount_on_node(_shell(node), mounts, conf, logs.append)

    anyio.run(go)
    assert any("Installed rclone and fuse3 on c1 node 0" in ln for ln in logs), logs
    data, mode = node.files["/n/.skyd/rclone.conf"]
    assert mode == 0o600 and b"s3cr3t-value" in data and b"endpoint = http://127.0.0.1:9" in data
    assert not any("s3cr3t" in c for c in node.commands)
    assert not any("s3cr3t" in ln for ln in logs)
    mount_cmds = [c for c in node.commands if "rclone mount" in c or "'rclone' mount" in c
                  or " mount skyd-s3:" in c]
    assert len(mount_cmds) == 2
    assert "'/n/home/my data'" in mount_cmds[0] and "skyd-s3:b1/p" in mount_cmds[0]
    assert "--vfs-cache-mode off" in mount_cmds[0]
    assert "/ck" in mount_cmds[1] and "--vfs-cache-mode full" in mount_cmds[1]


def test_gcs_mount_needs_a_service_account_key(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from skyd.errors import CredentialsError

    user = tmp_path / "adc.json"
    user.write_text(json.dumps({"type": "authorized_user", "client_id": "c",
                                "client_secret": "s", "refresh_token": "r"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(user))
    with pytest.raises(CredentialsError) as ei:
        anyio.run(rclone.config_text, {"GCS"})
    assert "service-account key" in str(ei.value) and "COPY" in (ei.value.hint or "")
    sa = tmp_path / "sa.json"
    sa.write_text(json.dumps({"type": "service_account", "project_id": "p1",
                              "private_key": "-----BEGIN PRIVATE KEY-----\nabc\n-----END",
                              "client_email": "x@p1.iam.gserviceaccount.com"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(sa))
    text = anyio.run(rclone.config_text, {"GCS"})
    assert text.startswith("[skyd-gcs]\ntype = google cloud storage\n")
    assert "project_number = p1" in text and "\\nabc\\n" in text  # one line, escaped
    m = BucketMount("~/g", "GCS", "gb", "", mode="MOUNT")
    assert "skyd-gcs:gb" in rclone.mount_argv(m, "/n/home/g", "/n/.skyd/rclone.conf", "/n/.skyd", 0)
