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
  (skyd.transports.relay), its sessions on extra connections of their own (sshd's
  MaxSessions caps one connection at 10).
- Host keys: checked against ``~/.ssh/known_hosts`` and skyd's own
  ``$SKYD_HOME/ssh/known_hosts``. First contact with an unknown host trusts its key and
  records it in skyd's file (trust on first use); a host whose key differs from a recorded
  one is refused (``kind="hostkey"``). ``SKYD_SSH_STRICT_HOST_KEYS=1`` refuses unknown hosts
  instead of trusting them.

asyncssh is imported when a transport first connects (skyd.transports.ssh_client), not with
this module: the providers that hold transports import without it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skyd import settings
from skyd.transports.base import AgentAddress, RunResult, Transport, command_line
from skyd.transports.relay import RELAY, Pipe, RelayListener
from skyd.transports.ssh_hosts import (
    NO_FORWARDING,
    SSHCommandError,
    SSHConnectError,
    SSHConnectionLost,
    SSHTarget,
    conn_errors,
    handshake_limiter,
    is_connection_error,
    known_hosts_path,
    load_known_hosts,
)

if TYPE_CHECKING:
    from skyd.transports.ssh_client import HostKeyClient

log = logging.getLogger("skyd.transports.ssh")

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


# Relay sessions per SSH connection (OpenSSH's MaxSessions defaults to 10).
RELAY_SESSIONS_PER_CONN = 8


_GCM = ("aes256-gcm@openssh.com", "aes128-gcm@openssh.com")


def cipher_order() -> list[str]:
    """asyncssh's default ciphers with AES-GCM first. Every frame to an agent crosses the
    SSH connection, and asyncssh's ChaCha20-Poly1305 builds two cipher objects per packet: on
    small packets AES-GCM costs 1.6-2.5x less CPU at both ends (bench/ssh_cipher_bench.py).
    Every OpenSSH since 6.2 offers it; a server that does not still gets its own choice
    from the rest of the list."""
    from asyncssh.encryption import get_default_encryption_algs

    rest = [a.decode() for a in get_default_encryption_algs()]
    return [a for a in _GCM if a in rest] + [a for a in rest if a not in _GCM]


@dataclass
class _RelayConn:
    conn: Any
    client: HostKeyClient
    sessions: int = 0

    def usable(self) -> bool:
        return not self.client.lost and not self.conn.is_closed()


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
    _client: HostKeyClient | None = field(default=None, repr=False)
    _sftp: Any = field(default=None, repr=False)
    _lock: anyio.Lock = field(default_factory=anyio.Lock, repr=False)
    _forwards: dict[tuple[str, int], _Forward] = field(default_factory=dict, repr=False)
    reconnects: int = 0
    _ever_connected: bool = field(default=False, repr=False)
    _relays: dict[str, RelayListener] = field(default_factory=dict, repr=False)
    _relay_conns: list[_RelayConn] = field(default_factory=list, repr=False)
    _relay_lock: anyio.Lock = field(default_factory=anyio.Lock, repr=False)
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

    async def _connect_once(self) -> tuple[Any, HostKeyClient]:
        import asyncssh

        from skyd.transports.ssh_client import HostKeyClient

        t = self.target
        strict = settings.SSH_STRICT_HOST_KEYS.get()
        client = HostKeyClient(t, await anyio.to_thread.run_sync(load_known_hosts), strict)
        opts: dict[str, Any] = {
            "known_hosts": client.known,
            "client_factory": lambda: client,
            "keepalive_interval": self.keepalive_interval,
            "keepalive_count_max": self.keepalive_count_max,
            "connect_timeout": self.connect_timeout,
            "encryption_algs": cipher_order(),
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
            async with handshake_limiter():
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
        for rc in self._relay_conns:
            rc.conn.close()
        self._relay_conns.clear()
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
            except conn_errors():
                self._drop()
                continue
            try:
                with anyio.fail_after(timeout) if timeout else contextlib.nullcontext():
                    out, err = await proc.communicate(data)
                status = proc.exit_status
            except conn_errors() as e:
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
        import asyncssh

        try:
            await sftp.posix_rename(tmp, remote)
        except (asyncssh.SFTPError, asyncssh.SFTPOpUnsupported):
            if await sftp.exists(remote):
                await sftp.remove(remote)
            await sftp.rename(tmp, remote)

    async def write_file(self, remote: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write ``data`` atomically (temp + rename) with permissions ``mode`` from creation."""
        import asyncssh

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
        if self.forwarding is None and self.target.key in NO_FORWARDING:
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
        """Open one direct-tcpip channel to the agent. The host is judged by behaviour, not
        by the refusal's code: refused by policy (``administratively prohibited``, OpenSSH),
        or refused with any other code (``OPEN_CONNECT_FAILED`` from asyncssh-based servers
        and some bastions) while the agent answers on that address when asked by exec on
        the host, means this host does not forward: the exec relay is used, and that is
        remembered for the host. An agent that does not answer by exec either is down: the
        forward is left to fail as it would anyway."""
        import asyncssh

        conn = await self.connection()
        try:
            _reader, writer = await conn.open_connection(addr.host, int(addr.port))
        except asyncssh.ChannelOpenError as e:
            if (e.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED
                    or await self._answers_by_exec(addr.host, int(addr.port))):
                log.info("%s: direct-tcpip refused (code %s: %s); using the exec relay",
                         self.target, e.code, e.reason)
                self.forwarding = False
                NO_FORWARDING.add(self.target.key)
            return
        except conn_errors():
            self._drop()
            return
        writer.close()
        self.forwarding = True

    async def _answers_by_exec(self, host: str, port: int) -> bool:
        """Does something accept TCP connections at (host, port) as seen on the host itself?"""
        probe = ("import socket,sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])),"
                 " 5).close()\nexcept OSError:\n sys.exit(3)\n")
        try:
            res = await self.run([self.python, "-S", "-c", probe, host, str(port)], timeout=20)
        except Exception:  # noqa: BLE001 - cannot tell: treat as not answering
            return False
        return res.ok

    async def probe_forwarding(self) -> bool | None:
        """Whether the host allows TCP forwarding (None: could not tell). Opens one
        direct-tcpip channel to the host's own 127.0.0.1:1: a policy refusal is remembered
        (agents there are reached through the relay); a refused connection means allowed."""
        import asyncssh

        conn = await self.connection()
        try:
            _reader, writer = await conn.open_connection("127.0.0.1", 1)
        except asyncssh.ChannelOpenError as e:
            if e.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED:
                self.forwarding = False
                NO_FORWARDING.add(self.target.key)
                return False
            return e.code == asyncssh.OPEN_CONNECT_FAILED or None
        except conn_errors():
            return None
        writer.close()
        return True

    async def relay_local(self, socket_path: str) -> int:
        """A local 127.0.0.1 port whose connections each run the relay on the host (one
        exec channel per connection) to the Unix socket ``socket_path``."""
        relay = self._relays.get(socket_path)
        if relay is not None and relay.serving:
            return relay.port
        command = shlex.join([self.python, "-S", "-c", RELAY, socket_path])  # -S: stdlib only, faster start

        async def open_pipe() -> Pipe:
            rc = await self._relay_conn()
            try:
                proc = await rc.conn.create_process(command, encoding=None)
            except BaseException:
                rc.sessions -= 1
                raise
            released = False

            def close() -> None:
                nonlocal released
                if not released:
                    released = True
                    rc.sessions -= 1
                proc.close()

            def alive() -> bool:
                return proc.exit_status is None and not proc.is_closing() and not proc.stdout.at_eof()

            return Pipe(proc.stdout, proc.stdin, close, alive)

        relay = RelayListener(open_pipe, name=str(self.target))
        await relay.start()
        self._relays[socket_path] = relay
        return relay.port

    async def _relay_conn(self) -> _RelayConn:
        """A connection for one more relay session (counted in): relays run on connections
        of their own, at most RELAY_SESSIONS_PER_CONN each, because sshd caps the sessions of
        one connection (MaxSessions, 10 by default) and commands and SFTP need the main one."""
        async with self._relay_lock:
            for rc in list(self._relay_conns):
                if not rc.usable() and rc.sessions <= 0:
                    rc.conn.abort()
                    self._relay_conns.remove(rc)
            for rc in self._relay_conns:
                if rc.usable() and rc.sessions < RELAY_SESSIONS_PER_CONN:
                    rc.sessions += 1
                    return rc
            conn, client = await self._connect_once()
            rc = _RelayConn(conn, client, sessions=1)
            self._relay_conns.append(rc)
            return rc
