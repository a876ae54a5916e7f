"""SSH transport: one asyncssh connection per host, multiplexing commands, SFTP and forwards.

- ``SSHTransport(target)`` keeps one connection to ``target`` and opens every command,
  SFTP session and port forward as a channel on it. The connection is opened lazily and
  re-opened with exponential backoff when it drops; local forwards are re-established on the
  same local port after a reconnect.
- Keepalives (``keepalive_interval`` / ``keepalive_count_max``) notice dead peers.
- A process-wide bound on concurrent SSH handshakes (``SKYD_SSH_MAX_CONNECTS``, default 16)
  keeps a 100-host ``ssh check`` or launch from opening 100 handshakes at once.
- The node agent is reached through ``agent_endpoint``: a local port forward where the host
  allows TCP forwarding, else (``AllowTcpForwarding no``: the first direct-tcpip channel is
  refused, and that is remembered for the host) an exec relay to the agent's Unix socket
  (skyd.transports.relay).
- Host keys: checked against ``~/.ssh/known_hosts`` and skyd's own
  ``$SKYD_HOME/ssh/known_hosts``. First contact with an unknown host trusts its key and
  records it in skyd's file (trust on first use); a host whose key differs from a recorded
  one is refused (``kind="hostkey"``). ``SKYD_SSH_STRICT_HOST_KEYS=1`` refuses unknown hosts
  instead of trusting them.

asyncssh is imported here; import this module lazily from CLI paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import asyncssh

from skyd import paths
from skyd.errors import SkydError
from skyd.transports.base import AgentAddress, CommandError, RunResult, Transport, command_line
from skyd.transports.relay import RELAY, Pipe, RelayListener

__all__ = [
    "RunResult",
    "SSHCommandError",
    "SSHConnectError",
    "SSHConnectionLost",
    "SSHTarget",
    "SSHTransport",
    "is_connection_error",
    "known_hosts_path",
]


def known_hosts_path() -> Path:
    return paths.home() / "ssh" / "known_hosts"


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
    """Could not open an SSH connection. ``kind``: unreachable | auth | hostkey | timeout."""

    def __init__(self, message: str, *, kind: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.kind = kind


class SSHConnectionLost(SkydError):
    """The connection dropped while a command was running (it may or may not have run)."""


class SSHCommandError(CommandError):
    """A command run with ``check=True`` exited non-zero on an SSH host."""


_CONN_ERRORS: tuple[type[BaseException], ...] = (
    asyncssh.ConnectionLost,
    asyncssh.DisconnectError,
    asyncssh.ChannelOpenError,
    asyncssh.sftp.SFTPConnectionLost,
    SSHConnectionLost,
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
    EOFError,
)


def is_connection_error(exc: BaseException) -> bool:
    """True when ``exc`` means the SSH connection (not the command) failed."""
    return isinstance(exc, _CONN_ERRORS) or (
        isinstance(exc, SSHConnectError) and exc.kind in ("unreachable", "timeout")
    )


# -- host keys ----------------------------------------------------------------------------


def _load_known_hosts() -> asyncssh.SSHKnownHosts:
    chunks = []
    for p in (Path("~/.ssh/known_hosts").expanduser(), known_hosts_path()):
        try:
            chunks.append(p.read_text())
        except OSError:
            continue
    return asyncssh.import_known_hosts("\n".join(chunks))


def _kh_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


# Hosts (SSHTarget.key) whose sshd refused a direct-tcpip channel: their agents are reached
# through the exec relay from then on (for this daemon's lifetime).
_NO_FORWARDING: set[str] = set()


class _Client(asyncssh.SSHClient):
    def __init__(self, target: SSHTarget, known: asyncssh.SSHKnownHosts, strict: bool) -> None:
        self.target = target
        self.known = known
        self.strict = strict
        self.lost = False
        self.hostkey_problem: str | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        # Called only when the key matched nothing in known_hosts.
        keys = self.known.match(host, addr, port if port != 22 else None)[0]
        if keys:
            self.hostkey_problem = "changed"
            return False
        if self.strict:
            self.hostkey_problem = "unknown"
            return False
        line = f"{_kh_name(host, port)} {key.export_public_key('openssh').decode().strip()}\n"
        p = known_hosts_path()
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a") as f:  # small append, once per new host
            f.write(line)
        return True


# -- connection limiter (per event loop) --------------------------------------------------

_LIMITERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _limiter() -> anyio.Semaphore:
    loop = asyncio.get_running_loop()
    sem = _LIMITERS.get(loop)
    if sem is None:
        sem = anyio.Semaphore(int(os.environ.get("SKYD_SSH_MAX_CONNECTS", "16")))
        _LIMITERS[loop] = sem
    return sem


@dataclass
class _Forward:
    remote_host: str
    remote_port: int
    local_port: int
    listener: Any = None


@dataclass
class SSHTransport(Transport):
    """One multiplexed SSH connection to ``target`` (see module doc)."""

    target: SSHTarget
    connect_timeout: float = 10.0
    connect_attempts: int = 4
    keepalive_interval: float = 15.0
    keepalive_count_max: int = 3
    backoff_initial: float = 0.2
    backoff_max: float = 5.0
    _conn: Any = field(default=None, repr=False)
    _client: _Client | None = field(default=None, repr=False)
    _sftp: Any = field(default=None, repr=False)
    _lock: anyio.Lock = field(default_factory=anyio.Lock, repr=False)
    _forwards: dict[tuple[str, int], _Forward] = field(default_factory=dict, repr=False)
    reconnects: int = 0
    _ever_connected: bool = field(default=False, repr=False)
    _relays: dict[str, RelayListener] = field(default_factory=dict, repr=False)
    #: True/False once known (a direct-tcpip channel opened or was refused); None: not yet
    forwarding: bool | None = None

    def __str__(self) -> str:
        return str(self.target)

    # -- connection ---------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return (
            self._conn is not None
            and self._client is not None
            and not self._client.lost
            and not self._conn.is_closed()
        )

    async def _connect_once(self) -> tuple[Any, _Client]:
        t = self.target
        strict = os.environ.get("SKYD_SSH_STRICT_HOST_KEYS", "") not in ("", "0")
        client = _Client(t, _load_known_hosts(), strict)
        opts: dict[str, Any] = {
            "known_hosts": client.known,
            "client_factory": lambda: client,
            "keepalive_interval": self.keepalive_interval,
            "keepalive_count_max": self.keepalive_count_max,
            "connect_timeout": self.connect_timeout,
        }
        if t.port:
            opts["port"] = t.port
        if t.user:
            opts["username"] = t.user
        if t.identity_file:
            opts["client_keys"] = [os.path.expanduser(t.identity_file)]
        if t.proxy_jump:
            opts["tunnel"] = t.proxy_jump
        try:
            async with _limiter():
                conn = await asyncssh.connect(t.host, **opts)
        except asyncssh.PermissionDenied as e:
            key = t.identity_file or "your default keys / ssh-agent"
            raise SSHConnectError(
                f"{t}: authentication failed ({e.reason or 'key refused'}) with {key}",
                kind="auth",
                hint=f"add the public key of {key} to ~/.ssh/authorized_keys on {t.host}, "
                "or set identity_file for this host in ssh_node_pools.yaml",
            ) from None
        except asyncssh.HostKeyNotVerifiable:
            if client.hostkey_problem == "unknown":
                raise SSHConnectError(
                    f"{t}: unknown host key and SKYD_SSH_STRICT_HOST_KEYS is set",
                    kind="hostkey",
                    hint=f"add the host's key to {known_hosts_path()} or ~/.ssh/known_hosts",
                ) from None
            raise SSHConnectError(
                f"{t}: HOST KEY CHANGED - the host's key differs from the recorded one "
                "(reinstalled host, or someone in the middle)",
                kind="hostkey",
                hint=f"if the change is expected, remove the host's line from "
                f"{known_hosts_path()} (and ~/.ssh/known_hosts), then retry",
            ) from None
        except TimeoutError:
            raise SSHConnectError(
                f"{t}: connection timed out after {self.connect_timeout:g}s",
                kind="timeout",
                hint="check the address/port and that the host is up and reachable",
            ) from None
        except (OSError, asyncssh.Error) as e:
            raise SSHConnectError(
                f"{t}: unreachable ({e})",
                kind="unreachable",
                hint="check the address/port in ssh_node_pools.yaml and that sshd runs there",
            ) from None
        return conn, client

    async def connection(self, attempts: int | None = None) -> Any:
        """The live asyncssh connection, (re)connecting with exponential backoff
        (``attempts`` tries, default ``connect_attempts``)."""
        tries = max(1, attempts if attempts is not None else self.connect_attempts)
        if self.connected:
            return self._conn
        async with self._lock:
            if self.connected:
                return self._conn
            had_conn = self._ever_connected
            self._drop()
            delay = self.backoff_initial
            for attempt in range(tries):
                try:
                    self._conn, self._client = await self._connect_once()
                    self._ever_connected = True
                    break
                except SSHConnectError as e:
                    if e.kind in ("auth", "hostkey") or attempt + 1 >= tries:
                        raise
                await anyio.sleep(delay)
                delay = min(delay * 2, self.backoff_max)
            if had_conn:
                self.reconnects += 1
            await self._restore_forwards()
            return self._conn

    def reset(self) -> None:
        """Forget the current connection (after an error); the next call reconnects."""
        self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.abort() if hasattr(self._conn, "abort") else self._conn.close()
        self._conn = None
        self._client = None
        self._sftp = None

    async def close(self) -> None:
        for fwd in self._forwards.values():
            if fwd.listener is not None:
                fwd.listener.close()
        self._forwards.clear()
        for relay in self._relays.values():
            relay.close()
        self._relays.clear()
        if self._conn is not None:
            conn = self._conn
            self._conn = None
            self._sftp = None
            conn.close()
            with anyio.move_on_after(2):
                await conn.wait_closed()

    async def __aenter__(self) -> SSHTransport:
        await self.connection()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- commands -----------------------------------------------------------------------

    async def run(
        self,
        cmd: str | Sequence[str],
        *,
        input: str | bytes | None = None,
        check: bool = False,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        idempotent: bool = False,
    ) -> RunResult:
        """Run a command (a shell string, or an argv list that gets shlex-quoted).

        A channel that cannot be opened (dead connection) is retried after reconnecting; a
        connection lost while the command runs raises SSHConnectionLost unless
        ``idempotent`` (then it is run again once)."""
        command = command_line(cmd, env)
        data = input.decode() if isinstance(input, bytes) else input
        for attempt in range(3):
            conn = await self.connection()
            try:
                proc = await conn.create_process(command, encoding="utf-8", errors="replace")
            except _CONN_ERRORS:
                self._drop()
                continue
            try:
                with anyio.fail_after(timeout) if timeout else contextlib.nullcontext():
                    out, err = await proc.communicate(data)
                status = proc.exit_status
            except _CONN_ERRORS as e:
                self._drop()
                if idempotent and attempt < 2:
                    continue
                raise SSHConnectionLost(f"{self.target}: connection lost during command") from e
            if status is None:  # channel closed without an exit status: connection died
                self._drop()
                if idempotent and attempt < 2:
                    continue
                raise SSHConnectionLost(f"{self.target}: connection lost during command")
            res = RunResult(int(status), str(out or ""), str(err or ""))
            if check and not res.ok:
                raise SSHCommandError(self.target, command, res)
            return res
        raise SSHConnectionLost(f"{self.target}: could not open a channel (connection keeps dropping)")

    # -- SFTP ---------------------------------------------------------------------------

    async def sftp(self) -> Any:
        """A shared SFTP client on this connection (asyncssh.SFTPClient)."""
        conn = await self.connection()
        if self._sftp is None:
            self._sftp = await conn.start_sftp_client()
        return self._sftp

    async def put(self, local: str | Path, remote: str, *, preserve: bool = True) -> None:
        """Upload ``local`` to ``remote`` (a temp name, then renamed over it)."""
        sftp = await self.sftp()
        tmp = f"{remote}.part-{os.getpid()}"
        await sftp.put(str(local), tmp, preserve=preserve)
        await self._rename_over(sftp, tmp, remote)

    async def get(self, remote: str, local: str | Path) -> None:
        sftp = await self.sftp()
        await sftp.get(remote, str(local), preserve=True)

    @staticmethod
    async def _rename_over(sftp: Any, tmp: str, remote: str) -> None:
        try:
            await sftp.posix_rename(tmp, remote)
        except (asyncssh.SFTPError, asyncssh.SFTPOpUnsupported):
            if await sftp.exists(remote):
                await sftp.remove(remote)
            await sftp.rename(tmp, remote)

    async def write_file(self, remote: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write ``data`` atomically (temp + rename) with permissions ``mode`` from creation."""
        sftp = await self.sftp()
        tmp = f"{remote}.tmp-{os.getpid()}"
        attrs = asyncssh.SFTPAttrs(permissions=mode)
        async with sftp.open(tmp, "wb", attrs) as f:
            await f.write(data)
        await sftp.chmod(tmp, mode)
        await self._rename_over(sftp, tmp, remote)

    # -- port forwarding ----------------------------------------------------------------

    async def forward_local(self, remote_host: str, remote_port: int) -> int:
        """A local 127.0.0.1 port forwarded to (remote_host, remote_port) as seen from the
        host. Re-calling returns the same port (re-established after a reconnect)."""
        await self.connection()  # reconnecting restores existing forwards
        key = (remote_host, int(remote_port))
        fwd = self._forwards.get(key)
        if fwd is not None and fwd.listener is not None:
            return fwd.local_port
        conn = self._conn
        listener = await conn.forward_local_port("127.0.0.1", 0, remote_host, int(remote_port))
        self._forwards[key] = _Forward(remote_host, int(remote_port), listener.get_port(), listener)
        return self._forwards[key].local_port

    async def close_forward(self, remote_host: str, remote_port: int) -> None:
        fwd = self._forwards.pop((remote_host, int(remote_port)), None)
        if fwd is not None and fwd.listener is not None:
            fwd.listener.close()

    async def _restore_forwards(self) -> None:
        for fwd in self._forwards.values():
            if fwd.listener is not None:
                fwd.listener.close()
            fwd.listener = None
            for port in (fwd.local_port, 0):
                try:
                    fwd.listener = await self._conn.forward_local_port(
                        "127.0.0.1", port, fwd.remote_host, fwd.remote_port
                    )
                    fwd.local_port = fwd.listener.get_port()
                    break
                except OSError:
                    continue


    # -- the node agent's byte stream ---------------------------------------------------

    async def agent_endpoint(self, addr: AgentAddress) -> tuple[str, int]:
        """A local port reaching the agent: a port forward to (addr.host, addr.port), or,
        on a host that refuses TCP forwarding, an exec relay to ``addr.socket``."""
        if self.forwarding is None and self.target.key in _NO_FORWARDING:
            self.forwarding = False
        if self.forwarding is None:
            await self._probe_forwarding(addr)
        if self.forwarding is not False:
            return "127.0.0.1", await self.forward_local(addr.host, addr.port)
        if not addr.socket:
            raise SSHConnectError(
                f"{self.target}: the host refuses TCP forwarding and this node's agent has no "
                "Unix socket to relay to (an agent from an older skyd)",
                kind="forwarding",
                hint="`skyd start CLUSTER` (or `skyd status -r`) restarts it with this skyd's agent",
            )
        return "127.0.0.1", await self.relay_local(addr.socket)

    async def _probe_forwarding(self, addr: AgentAddress) -> None:
        """Open one direct-tcpip channel to the agent: refused by policy (``administratively
        prohibited``) means this host never forwards; anything else leaves it to the
        forward (an agent that is down fails there as it would anyway)."""
        conn = await self.connection()
        try:
            _reader, writer = await conn.open_connection(addr.host, int(addr.port))
        except asyncssh.ChannelOpenError as e:
            if e.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED:
                self.forwarding = False
                _NO_FORWARDING.add(self.target.key)
            return
        except _CONN_ERRORS:
            self._drop()
            return
        writer.close()
        self.forwarding = True

    async def relay_local(self, socket_path: str) -> int:
        """A local 127.0.0.1 port whose connections each run the relay on the host (one
        exec channel per connection) to the Unix socket ``socket_path``."""
        relay = self._relays.get(socket_path)
        if relay is not None and relay.serving:
            return relay.port
        command = shlex.join([self.python, "-S", "-c", RELAY, socket_path])  # -S: stdlib only, faster start

        async def open_pipe() -> Pipe:
            conn = await self.connection()
            proc = await conn.create_process(command, encoding=None)

            def alive() -> bool:
                return proc.exit_status is None and not proc.is_closing() and not proc.stdout.at_eof()

            return Pipe(proc.stdout, proc.stdin, proc.close, alive)

        relay = RelayListener(open_pipe, name=str(self.target))
        await relay.start()
        self._relays[socket_path] = relay
        return relay.port
