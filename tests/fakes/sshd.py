"""A real OpenSSH server on 127.0.0.2 (a free port) for a clean test user (CI tier).

Needs root and Debian's ``openssh-server`` (``/usr/sbin/sshd``). The user ``skydtest`` is
created once (``useradd -m``, then ``usermod -p '*'`` to unlock key login; not root, whose
.bashrc runs ``pyenv init``). Config: ``UsePAM no``, ``StrictModes no`` (keys live under a
temp dir), a generated host key and an ``AuthorizedKeysFile`` with a generated ed25519 key.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio

from tests.fakes.sshhost import make_keypair
from tests.fakes.unixnames import fresh_home, per_worker

SSHD = "/usr/sbin/sshd"
USER = per_worker("skydtest")  # skydtest-gwN under xdist
# Where rootless podman keeps its images and settings under the user's home (containers-
# storage.conf(5), containers.conf(5)): the container tests' image cache, kept between runs.
ROOTLESS_PODMAN = (".local/share/containers", ".config/containers", ".config/cni", ".cache/containers")


def unavailable_reason() -> str | None:
    if not os.path.exists(SSHD):
        return "real-sshd tier: /usr/sbin/sshd missing (apt-get install -y openssh-server rsync)"
    if os.geteuid() != 0:
        return "real-sshd tier: needs root (creates a test user and runs sshd)"
    return None


def ensure_user(user: str = USER) -> Path:
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", user], check=True)
    subprocess.run(["usermod", "-p", "*", user], check=True)  # unlock for key login
    pw = pwd.getpwnam(user)
    home = Path(pw.pw_dir)
    if not home.is_dir():
        home.mkdir(parents=True)
        os.chown(home, pw.pw_uid, pw.pw_gid)
    return home


@dataclass
class RealSSHD:
    host: str
    port: int
    user: str
    key: Path
    home: Path


@contextlib.asynccontextmanager
async def real_sshd(
    tmp: Path, host: str = "127.0.0.2", port: int | None = None, *,
    allow_tcp_forwarding: bool = True, user: str = USER,
    allow_stream_local_forwarding: bool = True, ciphers: str | None = None,
) -> AsyncIterator[RealSSHD]:
    """`ciphers`: sshd_config's Ciphers (what the server offers), else OpenSSH's default."""
    if port is None:  # a free port, so that another run's sshd is never the one we reach
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
    home = ensure_user(user)
    # A fresh node: what an earlier test (or run) left in the shared user's home is not this
    # test's to find; the rootless container runtime's image store stays (a cache).
    fresh_home(home, keep=ROOTLESS_PODMAN)
    tmp.mkdir(parents=True, exist_ok=True)
    os.chmod(tmp, 0o755)
    priv, pub = make_keypair(tmp / "client")
    hostkey, _ = make_keypair(tmp / "hostkey", "ssh_host_ed25519_key")
    auth = tmp / "authorized_keys"
    shutil.copy(pub, auth)
    os.chmod(auth, 0o644)
    conf = tmp / "sshd_config"
    conf.write_text(
        f"ListenAddress {host}:{port}\nHostKey {hostkey}\nUsePAM no\nStrictModes no\n"
        f"PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        f"AuthorizedKeysFile {auth}\nAllowUsers {user}\nPidFile {tmp}/sshd.pid\n"
        "Subsystem sftp internal-sftp\nLogLevel ERROR\n"
        f"AllowTcpForwarding {'yes' if allow_tcp_forwarding else 'no'}\n"
        f"AllowStreamLocalForwarding {'yes' if allow_stream_local_forwarding else 'no'}\n"
        + (f"Ciphers {ciphers}\n" if ciphers else "")
    )
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    proc = await anyio.open_process([SSHD, "-D", "-e", "-f", str(conf)])
    try:
        with anyio.fail_after(10):
            while True:
                try:
                    with socket.create_connection((host, port), timeout=0.2):
                        break
                except OSError:
                    if proc.returncode is not None:
                        err = await proc.stderr.receive() if proc.stderr else b""
                        raise RuntimeError(f"sshd exited: {err!r}") from None
                    await anyio.sleep(0.05)
        yield RealSSHD(host, port, user, priv, home)
    finally:
        proc.terminate()
        with anyio.move_on_after(5):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
        await proc.aclose()
        # what the tests started as the user (agents) goes too
        subprocess.run(["pkill", "-KILL", "-u", user], check=False)
