"""The transport into Kubernetes pods: the Kubernetes API itself.

Commands run through the pod ``exec`` subresource over a WebSocket (subprotocols
``v5.channel.k8s.io`` / ``v4.channel.k8s.io``: every binary frame starts with its channel,
0 stdin, 1 stdout, 2 stderr, 3 the final status, 255 (v5) closes stdin). Files travel as
bytes over exec (``cat``, and ``tar`` for directories), and the node agent's byte stream is an
exec relay (``relay.RELAY`` reading the agent's Unix socket), so images need neither sshd nor
open ports. Only aiohttp is used here; the provider hands in the API server's address,
headers and TLS context (``KubeConn``).

v4 has no way to close stdin, so a command given ``input`` reads exactly that many bytes
(``head -c N | (cmd)``): it ends on both protocols.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import posixpath
import shlex
import ssl
import tarfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from skyd.errors import SkydError
from skyd.transports import relay
from skyd.transports.base import AgentAddress, CommandError, RunResult, Transport, command_line

__all__ = ["KubeConn", "KubeExecError", "KubeTransport"]

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255


class KubeExecError(SkydError):
    """The exec call itself failed (pod gone, API server unreachable, forbidden)."""


@dataclass
class KubeConn:
    """How to reach one API server (one kubeconfig context)."""

    server: str  # https://host:port (no trailing slash)
    headers: dict[str, str] = field(default_factory=dict)
    ssl: ssl.SSLContext | bool = True
    #: fresh auth headers per exec (tokens from exec plugins expire); None: ``headers``
    auth: Callable[[], Awaitable[dict[str, str]]] | None = None
    _session: aiohttp.ClientSession | None = None
    calls: int = 0  # exec sessions opened (benchmarks)

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def exit_code(status: dict[str, Any]) -> int:
    """The exit status in a channel-3 ``Status`` object."""
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            with contextlib.suppress(TypeError, ValueError):
                return int(cause.get("message"))
    return 126


class _Exec:
    """One exec session: stdout/stderr frames queued, stdin written as channel-0 frames."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.v5 = ws.protocol == PROTOCOLS[0]
        self.out: asyncio.Queue[bytes] = asyncio.Queue()
        self.err = bytearray()
        self.status: dict[str, Any] | None = None
        self.done = asyncio.Event()
        self._buf = b""
        self._sendq: asyncio.Queue[bytes] = asyncio.Queue()
        self._task = asyncio.ensure_future(self._pump())
        self._sender = asyncio.ensure_future(self._send_loop())

    async def _pump(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    data: bytes = msg.data
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    data = msg.data.encode()
                else:
                    break
                if not data:
                    continue
                ch, body = data[0], data[1:]
                if ch == STDOUT and body:
                    self.out.put_nowait(body)
                elif ch == STDERR:
                    self.err += body
                elif ch == ERROR and body:
                    with contextlib.suppress(ValueError):
                        self.status = json.loads(body)
        except (aiohttp.ClientError, OSError, asyncio.CancelledError):
            pass
        finally:
            self.done.set()
            self.out.put_nowait(b"")

    # -- relay.Reader / relay.Writer ------------------------------------------------------

    async def read(self, n: int = -1) -> bytes:
        if self._buf:
            data, self._buf = (self._buf, b"") if n < 0 else (self._buf[:n], self._buf[n:])
            return data
        chunk = await self.out.get()
        if not chunk:
            self.out.put_nowait(b"")  # stay at EOF
            return b""
        if 0 <= n < len(chunk):
            chunk, self._buf = chunk[:n], chunk[n:]
        return chunk

    def write(self, data: bytes) -> None:
        if data:
            self._sendq.put_nowait(bytes([STDIN]) + data)

    async def _send_loop(self) -> None:
        """One sender, so frames leave in the order they were written."""
        while True:
            frame = await self._sendq.get()
            try:
                if not self.ws.closed:
                    await self.ws.send_bytes(frame)
            except Exception:  # noqa: BLE001, S110 - the stream is going away; the reader ends it
                pass
            finally:
                self._sendq.task_done()

    async def drain(self) -> None:
        await self._sendq.join()

    def write_eof(self) -> None:
        if self.v5:
            self._sendq.put_nowait(bytes([CLOSE, STDIN]))

    def close(self) -> None:
        self._task.cancel()
        self._sender.cancel()
        asyncio.ensure_future(self.ws.close())

    def alive(self) -> bool:
        return not self.done.is_set()


class KubeTransport(Transport):
    """One pod's container, reached through the API server's exec subresource."""

    def __init__(self, conn: KubeConn, namespace: str, pod: str, container: str = "") -> None:
        self.conn = conn
        self.namespace = namespace
        self.pod = pod
        self.container = container
        self._relays: dict[str, relay.RelayListener] = {}
        self._lock = anyio.Lock()

    def __str__(self) -> str:
        return f"kube:{self.namespace}/{self.pod}"

    async def _open(self, argv: Sequence[str], stdin: bool) -> _Exec:
        q: list[tuple[str, str]] = [("command", a) for a in argv]
        if self.container:
            q.append(("container", self.container))
        q += [("stdout", "true"), ("stderr", "true")] + ([("stdin", "true")] if stdin else [])
        url = f"{self.conn.server}/api/v1/namespaces/{self.namespace}/pods/{self.pod}/exec"
        self.conn.calls += 1
        headers = await self.conn.auth() if self.conn.auth is not None else self.conn.headers
        try:
            ws = await self.conn.session().ws_connect(
                url, params=q, protocols=PROTOCOLS, headers=headers,
                ssl=self.conn.ssl, heartbeat=30, max_msg_size=0)
        except aiohttp.WSServerHandshakeError as e:
            raise KubeExecError(f"exec into {self}: HTTP {e.status} {e.message}") from None
        except (aiohttp.ClientError, OSError) as e:
            raise KubeExecError(f"exec into {self}: {type(e).__name__}: {e}") from None
        return _Exec(ws)

    async def _exec(self, command: str, data: bytes | None, timeout: float | None) -> tuple[int, bytes, bytes]:
        if data is not None:
            command = f"head -c {len(data)} | ( {command} )"
        with anyio.fail_after(timeout) if timeout else anyio.CancelScope():
            ex = await self._open(["/bin/sh", "-c", command], stdin=data is not None)
            try:
                if data is not None:
                    for i in range(0, len(data), 1 << 20):
                        await ex.ws.send_bytes(bytes([STDIN]) + data[i:i + (1 << 20)])
                    if ex.v5:
                        await ex.ws.send_bytes(bytes([CLOSE, STDIN]))
                out = bytearray()
                while True:
                    chunk = await ex.read()
                    if not chunk:
                        break
                    out += chunk
                await ex.done.wait()
            finally:
                ex.close()
        if ex.status is None:
            raise KubeExecError(f"exec into {self}: the stream ended without an exit status")
        return exit_code(ex.status), bytes(out), bytes(ex.err)

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
        command = command_line(cmd, env)
        data = input.encode() if isinstance(input, str) else input
        for attempt in range(2):
            try:
                code, out, err = await self._exec(command, data, timeout)
                break
            except KubeExecError:
                if not idempotent or attempt:
                    raise
                await anyio.sleep(0.5)
        res = RunResult(code, out.decode(errors="replace"), err.decode(errors="replace"))
        if check and not res.ok:
            raise CommandError(self, command, res)
        return res

    async def _checked(self, command: str, data: bytes | None = None) -> bytes:
        code, out, err = await self._exec(command, data, None)
        if code != 0:
            raise CommandError(self, command, RunResult(code, out.decode(errors="replace"),
                                                        err.decode(errors="replace")))
        return out

    async def write_file(self, remote: str, data: bytes, *, mode: int = 0o600) -> None:
        tmp = f"{remote}.tmp-skyd"
        await self._checked(
            f"umask 077 && mkdir -p {shlex.quote(posixpath.dirname(remote) or '.')} && "
            f"cat > {shlex.quote(tmp)} && chmod {mode:o} {shlex.quote(tmp)} && "
            f"mv -f {shlex.quote(tmp)} {shlex.quote(remote)}", data)

    async def put(self, local: str | Path, remote: str) -> None:
        data = await anyio.Path(local).read_bytes()
        mode = (await anyio.Path(local).stat()).st_mode & 0o777
        await self.write_file(remote, data, mode=mode or 0o644)

    async def get(self, remote: str, local: str | Path) -> None:
        data = await self._checked(f"cat {shlex.quote(remote)}")
        await anyio.Path(local).write_bytes(data)

    async def put_tree(self, src: str | Path, dst: str, excludes: Sequence[str] = ()) -> tuple[int, int]:
        """Copy a local directory (or file) to ``dst`` in the pod as a tar stream over exec.
        Returns (files, bytes)."""
        src_p = Path(src)

        def pack() -> tuple[bytes, int, int]:
            import fnmatch

            buf = io.BytesIO()
            files = size = 0

            def skip(rel: str) -> bool:
                parts = rel.split("/")
                return any(fnmatch.fnmatch(rel, e.strip("/")) or any(fnmatch.fnmatch(p, e.strip("/"))
                           for p in parts) for e in excludes if e.strip())

            with tarfile.open(fileobj=buf, mode="w") as tar:
                if src_p.is_file():
                    tar.add(src_p, arcname=src_p.name)
                    return buf.getvalue(), 1, src_p.stat().st_size
                for root, dirs, names in os.walk(src_p):
                    rel_root = os.path.relpath(root, src_p)
                    dirs[:] = [d for d in dirs if not skip(os.path.normpath(os.path.join(rel_root, d)))]
                    for n in names:
                        rel = os.path.normpath(os.path.join(rel_root, n))
                        if skip(rel):
                            continue
                        p = os.path.join(root, n)
                        tar.add(p, arcname=rel, recursive=False)
                        files += 1
                        size += os.path.getsize(p) if os.path.isfile(p) else 0
            return buf.getvalue(), files, size

        data, files, size = await anyio.to_thread.run_sync(pack)
        if src_p.is_file():
            target = posixpath.dirname(dst.rstrip("/")) or "."
            name = posixpath.basename(dst.rstrip("/"))
            cmd = (f"mkdir -p {shlex.quote(target)} && tar -xf - -C {shlex.quote(target)} && "
                   f"{{ [ {shlex.quote(src_p.name)} = {shlex.quote(name)} ] || mv -f "
                   f"{shlex.quote(posixpath.join(target, src_p.name))} {shlex.quote(dst.rstrip('/'))}; }}")
        else:
            cmd = f"mkdir -p {shlex.quote(dst)} && tar -xf - -C {shlex.quote(dst)}"
        await self._checked(cmd, data)
        return files, size

    async def open_stream(self, argv: Sequence[str]) -> relay.Pipe:
        """An exec session running ``argv`` with its stdin/stdout as a byte stream (e.g.
        ``sshd -i`` for `ssh CLUSTER`: skyd.pipeline.sshconfig)."""
        ex = await self._open(list(argv), stdin=True)
        return relay.Pipe(ex, ex, ex.close, ex.alive)

    async def open_pipe(self, socket: str) -> relay.Pipe:
        """An exec session running the relay to the agent's Unix socket."""
        ex = await self._open([self.python, "-S", "-c", relay.RELAY, socket], stdin=True)
        return relay.Pipe(ex, ex, ex.close, ex.alive)

    async def agent_endpoint(self, addr: AgentAddress) -> tuple[str, int]:
        if not addr.socket:
            raise KubeExecError(f"{self}: the agent has no Unix socket to relay to")
        async with self._lock:
            lst = self._relays.get(addr.socket)
            if lst is None or not lst.serving:
                sock = addr.socket

                async def open_pipe() -> relay.Pipe:
                    return await self.open_pipe(sock)

                lst = relay.RelayListener(open_pipe, str(self))
                await lst.start()
                self._relays[addr.socket] = lst
            return "127.0.0.1", lst.port

    async def close(self) -> None:
        for lst in self._relays.values():
            lst.close()
        self._relays.clear()
