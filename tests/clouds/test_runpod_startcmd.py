"""The RunPod start command (skyd/clouds/runpod/startcmd.py) really run, the way a pod runs
it: ``dockerArgs`` executed by a shell in a sandbox shaped like an image without sshd
started (bubblewrap: the host's tools read-only, an empty /root, /run and /tmp, its own
/etc/ssh and /etc/profile.d, its own network namespace with only loopback). The command
must start the real OpenSSH sshd accepting ``$PUBLIC_KEY`` for root, with python3 found and
the container's environment exported to login shells. Package installs go to a stub
``apt-get`` that records them (nothing is downloaded). Only the sandbox's own loopback is
connected to."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from skyd.clouds.runpod.startcmd import docker_args

TOOLS = ("bwrap", "ssh", "ssh-keygen")


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS) or not Path("/usr/sbin/sshd").exists(),
                    reason="needs bubblewrap and OpenSSH (sshd, ssh, ssh-keygen) installed")
def test_the_start_command_starts_sshd_with_the_key_in_a_bare_container(tmp_path: Path) -> None:
    w = tmp_path
    shutil.copytree("/etc/ssh", w / "etc-ssh", symlinks=True)
    (w / "profile.d").mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(w / "key")], check=True)
    stub = w / "stub"
    stub.mkdir()
    (stub / "apt-get").write_text('#!/bin/sh\necho "apt-get $*" >> /tmp/w/apt.log\nexit 0\n')
    (stub / "apt-get").chmod(0o755)
    (w / "cmd.txt").write_text(docker_args())
    (w / "inner.sh").write_text(
        'eval "$(cat /tmp/w/cmd.txt)" &\n'
        "for i in $(seq 1 100); do [ -f /run/sshd.pid ] && break; sleep 0.1; done\n"
        "ssh -i /tmp/w/key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes "
        "-o ConnectTimeout=5 root@127.0.0.1 'echo IN-POD $(id -u); command -v python3; "
        ". /etc/profile.d/skyd-container-env.sh; echo IMAGE-ENV=$IMAGE_ENV'\n")
    r = subprocess.run(
        ["bwrap", "--ro-bind", "/", "/", "--tmpfs", "/root", "--tmpfs", "/run", "--tmpfs", "/tmp",
         "--bind", str(w / "etc-ssh"), "/etc/ssh", "--bind", str(w / "profile.d"), "/etc/profile.d",
         "--bind", str(w), "/tmp/w", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
         "--unshare-pid", "--die-with-parent", "--clearenv",
         "--setenv", "PUBLIC_KEY", (w / "key.pub").read_text().strip(),
         "--setenv", "IMAGE_ENV", "rocm-paths", "--setenv", "PATH", "/tmp/w/stub:/usr/sbin:/usr/bin:/sbin:/bin",
         "sh", "/tmp/w/inner.sh"],
        capture_output=True, text=True, timeout=60)
    out = r.stdout + r.stderr
    assert "IN-POD 0" in out, out  # root logged in with the key from $PUBLIC_KEY
    assert "python3" in out and "IMAGE-ENV=rocm-paths" in out, out
    assert "PUBLIC_KEY" not in (w / "profile.d" / "skyd-container-env.sh").read_text()
    # what was missing (rsync here, or sshd in an image) is installed with the package manager
    log = (w / "apt.log").read_text() if (w / "apt.log").exists() else ""
    if shutil.which("rsync") is None:
        assert "install -y --no-install-recommends openssh-server rsync python3" in log, log
