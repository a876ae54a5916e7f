"""Pod ``exec`` over a WebSocket with the stdlib only (socket, ssl, threads): the one-shot
CLI's channel to a daemon in Kubernetes, without importing aiohttp and asyncio per command.

The wire is the API server's (the same skyd.transports.kube speaks with aiohttp): an HTTP/1.1
upgrade (RFC 6455) to ``/api/v1/namespaces/NS/pods/POD/exec?command=…&stdin=true&stdout=true``
with subprotocol ``v5.channel.k8s.io`` or ``v4.channel.k8s.io``; every binary message starts
with its channel (0 stdin, 1 stdout, 2 stderr, 3 the final status, 255 (v5) closes a stream).
Client frames are masked, as the RFC requires.

``carry(sock)`` hands one accepted local connection to a new exec session: two threads pump
bytes, and both ends close when either side ends.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import struct
import threading
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class ExecRefused(OSError):
    """The API server did not upgrade the exec request (pod missing, forbidden, …)."""


@dataclass
class Endpoint:
    """One API server as a kubeconfig context describes it."""

    server: str
    headers: dict[str, str] = field(default_factory=dict)
    tls: ssl.SSLContext | None = None  # None: plain http


class ExecSocket:
    """One exec session: send stdin bytes, receive stdout bytes (stderr kept aside)."""

    def __init__(self, ep: Endpoint, namespace: str, pod: str, container: str,
                 argv: list[str], timeout: float = 30.0) -> None:
        u = urlsplit(ep.server)
        host = u.hostname or "localhost"
        port = u.port or (443 if u.scheme == "https" else 80)
        q = urlencode([("command", a) for a in argv]
                      + [("container", container), ("stdin", "true"), ("stdout", "true"),
                         ("stderr", "true")])
        path = f"{u.path.rstrip('/')}/api/v1/namespaces/{namespace}/pods/{pod}/exec?{q}"
        raw = socket.create_connection((host, port), timeout=timeout)
        try:
            self.sock: socket.socket = (ep.tls.wrap_socket(raw, server_hostname=host)
                                        if ep.tls is not None else raw)
            key = base64.b64encode(os.urandom(16)).decode()
            head = [f"GET {path} HTTP/1.1", f"Host: {u.netloc}", "Upgrade: websocket",
                    "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
                    "Sec-WebSocket-Version: 13",
                    f"Sec-WebSocket-Protocol: {', '.join(PROTOCOLS)}",
                    *(f"{k}: {v}" for k, v in ep.headers.items())]
            self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ExecRefused("the API server closed the exec request")
                buf += chunk
                if len(buf) > 1 << 20:
                    raise ExecRefused("the API server's answer to exec has no end")
            header, self._buf = buf.split(b"\r\n\r\n", 1)
            lines = header.decode(errors="replace").split("\r\n")
            status = lines[0].split(" ", 2)
            if len(status) < 2 or status[1] != "101":
                raise ExecRefused(f"exec into {namespace}/{pod}: {lines[0]}"
                                  + _message(self._buf))
            fields = {ln.split(":", 1)[0].strip().lower(): ln.split(":", 1)[1].strip()
                      for ln in lines[1:] if ":" in ln}
            want = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()  # noqa: S324 - RFC 6455
            if fields.get("sec-websocket-accept") != want:
                raise ExecRefused("the API server's WebSocket handshake is not valid")
            self.v5 = fields.get("sec-websocket-protocol") == PROTOCOLS[0]
        except BaseException:
            raw.close()
            raise
        self.sock.settimeout(None)
        self._send_lock = threading.Lock()
        self.stderr = bytearray()
        self.status: bytes = b""
        self._frag = b""

    # -- frames ---------------------------------------------------------------------------

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        with self._send_lock:
            self.sock.sendall(head + mask + _mask(payload, mask))

    def _read_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise EOFError
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _read_message(self) -> tuple[int, bytes]:
        """The next whole message: (opcode, payload); pings answered here."""
        while True:
            b0, b1 = self._read_exact(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read_exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read_exact(8))[0]
            mask = self._read_exact(4) if b1 & 0x80 else b""
            payload = self._read_exact(n)
            if mask:
                payload = _mask(payload, mask)
            if opcode == 0x9:
                self._send_frame(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            if opcode == 0x8:
                return 0x8, payload
            if opcode == 0x0:
                self._frag += payload
            else:
                self._frag = payload
                self._op = opcode
            if b0 & 0x80:
                data, self._frag = self._frag, b""
                return self._op, data

    # -- streams ----------------------------------------------------------------------------

    def send_stdin(self, data: bytes) -> None:
        self._send_frame(0x2, b"\x00" + data)

    def close_stdin(self) -> None:
        if self.v5:
            self._send_frame(0x2, b"\xff\x00")

    def recv_stdout(self) -> bytes:
        """Next stdout bytes; b"" at the end of the session."""
        while True:
            try:
                op, data = self._read_message()
            except (EOFError, OSError):
                return b""
            if op == 0x8 or not data:
                if op == 0x8:
                    return b""
                continue
            ch, body = data[0], data[1:]
            if ch == 1 and body:
                return body
            if ch == 2:
                self.stderr += body[-4096:]
            elif ch == 3:
                self.status = body

    def failed(self) -> bool:
        """The command ended with a non-zero status (channel 3)."""
        import json

        try:
            return bool(self.status) and json.loads(self.status).get("status") != "Success"
        except (ValueError, AttributeError):
            return True

    def close(self) -> None:
        try:
            self._send_frame(0x8, struct.pack("!H", 1000))
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def _mask(data: bytes, mask: bytes) -> bytes:
    n = len(data)
    m = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(data, "big") ^ m).to_bytes(n, "big")


def _message(body: bytes) -> str:
    import json

    try:
        doc = json.loads(body.decode(errors="replace") or "{}")
    except ValueError:
        return ""
    msg = doc.get("message") if isinstance(doc, dict) else None
    return f": {msg}" if msg else ""


def carry(conn: socket.socket, open_exec: object, on_error: object) -> None:
    """Pump ``conn`` (an accepted local connection) through a new exec session made by
    ``open_exec()``, in two threads; ``on_error(text)`` gets why a session could not open."""

    def run() -> None:
        try:
            ex: ExecSocket = open_exec()  # type: ignore[operator]
        except (OSError, ssl.SSLError, ValueError) as e:
            on_error(str(e))  # type: ignore[operator]
            conn.close()
            return

        def up() -> None:
            try:
                while True:
                    data = conn.recv(65536)
                    if not data:
                        break
                    ex.send_stdin(data)
                ex.close_stdin()
            except OSError:
                pass

        threading.Thread(target=up, name="skyd-kube-up", daemon=True).start()
        try:
            while True:
                data = ex.recv_stdout()
                if not data:
                    break
                conn.sendall(data)
        except OSError:
            pass
        finally:
            if ex.stderr and ex.failed():
                on_error(ex.stderr.decode(errors="replace").strip())  # type: ignore[operator]
            ex.close()
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    threading.Thread(target=run, name="skyd-kube-exec", daemon=True).start()
