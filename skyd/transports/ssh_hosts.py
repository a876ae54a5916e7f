"""SSH targets and connection plumbing shared by the SSH transport: ``SSHTarget`` (where
and as whom), the error types, host-key checking (``~/.ssh/known_hosts`` plus skyd's own
trust-on-first-use file) and the process-wide bound on concurrent handshakes.

asyncssh is imported only where a key is made or read, or the connection errors are asked
for: the providers' facts and checks import this module without it (the asyncssh client
that records new keys is skyd.transports.ssh_client).
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skyd import paths, settings
from skyd.errors import SkydError
from skyd.transports.base import CommandError

if TYPE_CHECKING:
    import asyncssh


def known_hosts_path() -> Path:
    return paths.home() / "ssh" / "known_hosts"


# One writer at a time of skyd's known_hosts in this process: terminations of several
# clusters (`down -a`) forget keys in worker threads at once, and a new host's key is
# appended meanwhile; each rewrite is read-modify-write, so two at once lost one's edit (and
# their shared temporary name made one fail with FileNotFoundError).
KNOWN_HOSTS_LOCK = threading.Lock()


_KEY_LOCK = threading.Lock()


def ensure_key(priv: Path) -> str:
    """skyd's ed25519 key at ``priv`` (0600), made once; its public line. Written under a
    unique name and linked into place (another process's key made meanwhile is kept), and
    the public half (``priv`` + ``.pub``) always derived from the private key on disk, so
    two launches making the key at once never leave a private key and a public key of two
    different pairs. Blocking: call from a worker thread."""
    import asyncssh

    with _KEY_LOCK:
        if not priv.exists():
            priv.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            key = asyncssh.generate_private_key("ssh-ed25519", comment="skyd")
            tmp = priv.with_name(f".{priv.name}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(key.export_private_key())
            try:
                os.link(tmp, priv)  # fails if another process made one meanwhile: keep theirs
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        os.chmod(priv, 0o600)
        pub = asyncssh.read_private_key(str(priv)).export_public_key().decode().strip()
        pub_path = priv.with_name(priv.name + ".pub")
        try:
            ok = pub_path.read_text().strip() == pub
        except OSError:
            ok = False
        if not ok:
            pub_path.write_text(pub + "\n")
    return pub


def forget_host_keys(names: set[str]) -> None:
    """Drop skyd's recorded host keys of these known_hosts names (``host`` or
    ``[host]:port``): cloud addresses are reused, and the next machine on one has another
    key, which trust-on-first-use must accept. Blocking: call from a worker thread."""
    if not names:
        return
    path = known_hosts_path()
    with KNOWN_HOSTS_LOCK:
        try:
            lines = path.read_text().splitlines(keepends=True)
        except OSError:
            return
        keep = [ln for ln in lines if not set(ln.split(" ", 1)[0].split(",")) & names]
        if len(keep) == len(lines):
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write("".join(keep))
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


@dataclass(frozen=True)
class SSHTarget:
    """Where and as whom to connect. ``host`` may be an ~/.ssh/config alias."""

    host: str
    port: int | None = None  # None: ~/.ssh/config or 22
    user: str | None = None
    identity_file: str | None = None
    proxy_jump: str | None = None

    @property
    def key(self) -> str:
        return f"{self.user or ''}@{self.host}:{self.port or 22}"

    def __str__(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{self.host}{port}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "identity_file": self.identity_file,
            "proxy_jump": self.proxy_jump,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SSHTarget:
        return cls(
            host=str(d["host"]),
            port=int(d["port"]) if d.get("port") else None,
            user=d.get("user") or None,
            identity_file=d.get("identity_file") or None,
            proxy_jump=d.get("proxy_jump") or None,
        )

    def ssh_command(self, *, connect_timeout: int = 10) -> list[str]:
        """An OpenSSH client command line with the same settings (for rsync's ``-e``)."""
        cmd = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}"]
        cmd += ["-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3"]
        files = [str(known_hosts_path())]
        user_kh = Path("~/.ssh/known_hosts").expanduser()
        if user_kh.exists():
            files.append(str(user_kh))
        cmd += ["-o", "UserKnownHostsFile=" + " ".join(files), "-o", "StrictHostKeyChecking=yes"]
        if self.port:
            cmd += ["-p", str(self.port)]
        if self.identity_file:
            cmd += ["-i", os.path.expanduser(self.identity_file), "-o", "IdentitiesOnly=yes"]
        if self.user:
            cmd += ["-l", self.user]
        if self.proxy_jump:
            cmd += ["-J", self.proxy_jump]
        return cmd


class SSHConnectError(SkydError):
    """Could not open an SSH connection (or reach the agent over it). ``kind``: unreachable |
    auth | hostkey | timeout | forwarding."""

    def __init__(self, message: str, *, kind: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.kind = kind


class SSHConnectionLost(SkydError):
    """The connection dropped while a command was running (it may or may not have run)."""


class SSHCommandError(CommandError):
    """A command run with ``check=True`` exited non-zero on an SSH host."""


@functools.cache
def conn_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean the connection (not the command) failed."""
    import asyncssh

    return (
        asyncssh.ConnectionLost,
        asyncssh.DisconnectError,
        asyncssh.ChannelOpenError,
        asyncssh.sftp.SFTPConnectionLost,
        asyncssh.sftp.SFTPNoConnection,  # a request sent after the channel closed
        SSHConnectionLost,
        BrokenPipeError,
        ConnectionResetError,
        ConnectionAbortedError,
        EOFError,
    )


def is_connection_error(exc: BaseException) -> bool:
    """True when ``exc`` means the SSH connection (not the command) failed."""
    return isinstance(exc, conn_errors()) or (
        isinstance(exc, SSHConnectError) and exc.kind in ("unreachable", "timeout")
    )


# -- host keys ----------------------------------------------------------------------------


def load_known_hosts() -> asyncssh.SSHKnownHosts:
    """Both known_hosts files, parsed. Blocking: call from a worker thread."""
    import asyncssh

    chunks = []
    for p in (Path("~/.ssh/known_hosts").expanduser(), known_hosts_path()):
        try:
            chunks.append(p.read_text())
        except OSError:
            continue
    return asyncssh.import_known_hosts("\n".join(chunks))


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


# Hosts (SSHTarget.key) whose sshd refused a direct-tcpip channel: their agents are reached
# through the exec relay from then on (for this daemon's lifetime).
NO_FORWARDING: set[str] = set()


# -- connection limiter (per event loop) --------------------------------------------------

_LIMITERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def handshake_limiter() -> anyio.Semaphore:
    loop = asyncio.get_running_loop()
    sem = _LIMITERS.get(loop)
    if sem is None:
        sem = anyio.Semaphore(settings.SSH_MAX_CONNECTS.get())
        _LIMITERS[loop] = sem
    return sem
