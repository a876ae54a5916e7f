"""Connections to the daemon's socket: bounded in number and in time.

- **Header deadline.** A new connection must send a complete request head within
  ``SKYD_HEADER_TIMEOUT`` seconds (10) or it is closed, so half-open connections are not
  held. Between requests a kept-alive connection may idle ``KEEPALIVE_TIMEOUT`` (30 s, longer
  than the clients' own keep-alive: aiohttp's 15 s, the CLI's 5 s, so no client races the
  close); a second request head that stalls is closed by the same timer.
- **Body deadline.** A body must arrive within :data:`BODY_TIMEOUT` (``read_body``).
- **A limit with the newest first.** At most ``limit`` connections are open. When a new one
  would pass the limit, the oldest *idle* connection (no request in progress: half-open, or
  kept alive between requests) is closed to make room, so a client that just connected --
  the CLI's own request -- is always served while others merely hold sockets. Only when
  every connection is busy with a request is the new one refused, with a 503 that says why.

aiohttp has no hook for this, so the site wraps each protocol object in a proxy that counts
it (:class:`GuardedSockSite`)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from typing import Any

import anyio
from aiohttp import web

from skyd import settings

log = logging.getLogger("skyd.daemon.connections")

DEFAULT_LIMIT = settings.MAX_CONNECTIONS.default
DEFAULT_HEADER_TIMEOUT = settings.HEADER_TIMEOUT.default
KEEPALIVE_TIMEOUT = 30.0
BODY_TIMEOUT = settings.BODY_TIMEOUT.get()


def limit_from_env() -> int:
    try:
        return max(2, settings.MAX_CONNECTIONS.get())
    except settings.SettingError:
        return DEFAULT_LIMIT


def header_timeout_from_env() -> float:
    try:
        return max(0.5, settings.HEADER_TIMEOUT.get())
    except settings.SettingError:
        return DEFAULT_HEADER_TIMEOUT


def _refusal(limit: int) -> bytes:
    body = json.dumps({"error": {
        "type": "DaemonUnavailableError", "exit_code": 7, "field": None, "line": None,
        "message": f"the skyd daemon is busy: all {limit} connections are serving requests",
        "hint": "retry in a moment; raise SKYD_MAX_CONNECTIONS for more concurrent streams"}})
    raw = body.encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)


class ConnectionGuard:
    """Counts open connections; evicts the oldest idle one or refuses past ``limit``."""

    def __init__(self, limit: int, header_timeout: float = DEFAULT_HEADER_TIMEOUT) -> None:
        self.limit = limit
        self.header_timeout = header_timeout
        self.open: OrderedDict[_Proxy, asyncio.BaseTransport] = OrderedDict()
        self.evicted = 0
        self.refused = 0

    def admit(self, proxy: _Proxy, transport: asyncio.BaseTransport) -> bool:
        while len(self.open) >= self.limit:
            victim = next((p for p in self.open if not p.busy()), None)
            if victim is None:
                self.refused += 1
                if self.refused in (1, 10, 100) or self.refused % 1000 == 0:
                    log.warning("refused a connection: %d busy (refused so far: %d)",
                                len(self.open), self.refused)
                return False
            t = self.open.pop(victim)
            self.evicted += 1
            t.close()  # its connection_lost comes later; it no longer counts
        self.open[proxy] = transport
        return True

    def gone(self, proxy: _Proxy) -> None:
        self.open.pop(proxy, None)


class _Proxy(asyncio.Protocol):
    """Forwards every protocol callback to aiohttp's handler, once admitted."""

    def __init__(self, guard: ConnectionGuard, handler: Any) -> None:
        self.guard = guard
        self.handler = handler
        self.admitted = False
        self._deadline: asyncio.TimerHandle | None = None
        self._transport: asyncio.BaseTransport | None = None

    def busy(self) -> bool:
        return bool(getattr(self.handler, "_request_in_progress", True))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self.guard.admit(self, transport):
            try:
                transport.write(_refusal(self.guard.limit))  # type: ignore[attr-defined]
            finally:
                transport.close()
            return
        self.admitted = True
        self._transport = transport
        self._deadline = asyncio.get_running_loop().call_later(
            self.guard.header_timeout, self._head_deadline)
        self.handler.connection_made(transport)

    def _head_deadline(self) -> None:
        """No complete request head yet: close (a half-open connection)."""
        self._deadline = None
        if getattr(self.handler, "_request_count", 1) == 0 and not self.busy():
            if self._transport is not None:
                self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.gone(self)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self.admitted:
            self.handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.admitted:
            self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        if self.admitted:
            return self.handler.eof_received()  # type: ignore[no-any-return]
        return None

    def pause_writing(self) -> None:
        if self.admitted:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.handler.resume_writing()


class GuardedSockSite(web.SockSite):
    """``web.SockSite`` whose connections go through a :class:`ConnectionGuard`."""

    def __init__(self, runner: web.BaseRunner, sock: Any, guard: ConnectionGuard) -> None:
        super().__init__(runner, sock)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        guard = self.guard
        self._server = await loop.create_server(
            lambda: _Proxy(guard, server()), sock=self._sock, backlog=self._backlog)


async def read_body(request: web.Request) -> bytes:
    """The request's body, within :data:`BODY_TIMEOUT` (a client that stops sending is
    answered 408 and its connection closed)."""
    try:
        with anyio.fail_after(BODY_TIMEOUT):
            return await request.read()
    except TimeoutError:
        from skyd.errors import InvalidSpecError

        err = InvalidSpecError(f"the request body did not arrive within {BODY_TIMEOUT:g}s",
                               field="body", hint="send the whole body at once")
        err.http_status = 408  # type: ignore[attr-defined]
        raise err from None
