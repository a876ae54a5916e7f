"""The network rule for the whole suite (tests/conftest.py ``network_guard``), and `skyd check`
/ `skyd launch --dryrun` of a user with no cloud credentials: no connection leaves the
machine (no instance-metadata probe for credentials) and nothing waits on one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.netguard import sitecustomize as netguard
from tests.support.daemon import DaemonProc, cli


def test_a_connection_outside_loopback_is_refused_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYD_NETGUARD_LOG")  # this test's own refusals: counted here only
    before = len(netguard.VIOLATIONS)
    s = socket.socket()
    try:
        with pytest.raises(PermissionError, match="network rule"):
            s.connect(("192.0.2.1", 9))  # refused by the hook, before any packet
        with pytest.raises(PermissionError):
            socket.getaddrinfo("example.invalid", 443)  # a lookup is a packet out too
    finally:
        s.close()
    assert len(netguard.VIOLATIONS) == before + 2
    del netguard.VIOLATIONS[before:]  # seen; the per-test check must not fail on them
    with socket.create_server(("127.0.0.1", 0)) as srv:  # loopback is fine
        socket.create_connection(srv.getsockname()[:2], timeout=5).close()


def test_processes_the_tests_start_are_guarded_too(tmp_path: Path) -> None:
    log = tmp_path / "sub.log"
    code = ("import socket\ntry:\n    socket.create_connection(('192.0.2.1', 9), timeout=1)\n"
            "except PermissionError as e:\n    print('refused', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "SKYD_NETGUARD_LOG": str(log)})
    assert "refused" in r.stdout, (r.stdout, r.stderr)
    assert "192.0.2.1" in log.read_text()


USER_ENV_DROP = ("SKYD_AWS_LOOPBACK_ONLY", "AWS_EC2_METADATA_DISABLED", "NO_GCE_CHECK",
                 "GCE_METADATA_HOST", "GCE_METADATA_IP", "GCE_METADATA_ROOT", "AWS_CONFIG_FILE",
                 "AWS_SHARED_CREDENTIALS_FILE", "GOOGLE_APPLICATION_CREDENTIALS")


def test_check_and_dryrun_without_credentials_stay_on_this_machine(skyd_home: Path, tmp_path: Path) -> None:
    """A user's machine (not a cloud VM) without any cloud credentials: the daemon's
    credential discovery asks no metadata server, so the guard sees nothing and no probe
    timeout is waited out."""
    log = tmp_path / "user.log"
    log.write_text("")
    home = tmp_path / "userhome"
    home.mkdir()
    d = DaemonProc(SKYD_NETGUARD_LOG=str(log), HOME=str(home))
    for k in USER_ENV_DROP:
        d.env.pop(k, None)
    env = {k: v for k, v in d.env.items()}
    d.start()
    try:
        t0 = time.monotonic()
        r = cli("check", "-o", "json", env=env, timeout=120)
        check_s = time.monotonic() - t0
        assert r.returncode == 0, r.stderr
        t0 = time.monotonic()
        r = cli("launch", "--dryrun", "-y", "--gpus", "T4:1", "echo hi", env=env, timeout=120)
        dry_s = time.monotonic() - t0
        assert "T4" in r.stdout + r.stderr, (r.stdout, r.stderr)
    finally:
        d.terminate()
        d.cleanup()
    assert log.read_text() == "", f"connections outside 127.0.0.0/8: {log.read_text()}"
    # no metadata probe waited out (botocore's is 1 s a try): figures in the failure message
    assert check_s < 30 and dry_s < 30, (check_s, dry_s)


def test_ec2_is_recognised_from_local_files_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from skyd.clouds.aws.session import on_ec2

    monkeypatch.delenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", raising=False)
    vendor, tag = tmp_path / "sys_vendor", tmp_path / "board_asset_tag"
    vendor.write_text("QEMU\n")
    assert not on_ec2((str(vendor), str(tmp_path / "missing")))
    vendor.write_text("Amazon EC2\n")
    assert on_ec2((str(vendor),))
    tag.write_text("i-0123456789abcdef0\n")
    assert on_ec2((str(tag),))
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9")
    assert on_ec2(())
