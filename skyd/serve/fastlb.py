"""The load balancer's fast path: an HTTP/1.1 reverse proxy on raw asyncio protocols with
httptools (llhttp) parsing, on the daemon's own event loop.

The request head is parsed and re-sent upstream (hop-by-hop headers dropped,
X-Forwarded-For added); the request body goes up as it arrives (re-chunked when the
client sent it chunked). The response is parsed only to find where it ends: its bytes
are relayed to the client exactly as they arrive, so chunked and server-sent-event
streams pass chunk by chunk with no copy into Python objects. Upstream connections are
kept alive in a pool per replica. Back-pressure both ways: a slow reader pauses the
other side's reads.

Rules (docs/serve.md): a request is retried on another replica only when connecting
failed (no byte went upstream); a replica that fails after that answers 502 (or, once
the response started, the client's connection is closed); no ready replica answers 503
with the reason. In-flight counts go up when a replica is picked and down exactly once
when its exchange ends, whatever the outcome. Upgrades (WebSocket) are answered 501.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from typing import Any, cast

import anyio
import httptools

from skyd.serve.lb import LoadBalancer
from skyd.serve.policies import Backend

HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
    b"trailer", b"upgrade", b"proxy-connection", b"x-forwarded-for",
})  # fmt: skip
POOL_MAX = 256  # idle upstream connections kept per replica
# An idle upstream connection older than this is not reused: servers close idle
# keep-alive connections (uvicorn after 5 s), and a request written into one that is
# closing could not be retried (bytes went upstream).
POOL_IDLE_S = 4.0


def _simple(status: int, text: str, *, close: bool = False) -> bytes:
    body = text.encode()
    reason = {502: "Bad Gateway", 503: "Service Unavailable", 501: "Not Implemented",
              400: "Bad Request"}.get(status, "Error")
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nX-Skyd-Reason: {text.strip()}\r\n")
    if close:
        head += "Connection: close\r\n"
    return head.encode() + b"\r\n" + body


class _Exchange:
    """One request from a client: parsed head, body not yet sent, its replica."""

    __slots__ = ("method", "url", "headers", "chunked", "pending", "complete", "key",
                 "backend", "up", "done", "keep_alive", "tried", "sent", "t0", "status", "nbytes")

    def __init__(self) -> None:
        self.method = b""
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunked = False
        self.pending: list[bytes] = []  # body bytes (already framed) waiting for upstream
        self.complete = False  # the client sent the whole request
        self.key: bytes | None = None
        self.backend: Backend | None = None
        self.up: _Upstream | None = None
        self.done = False
        self.keep_alive = True
        self.tried: set[Backend] = set()
        self.sent = False  # a byte went upstream
        self.t0 = 0.0  # (access log) when the head was in; the answer's status and size
        self.status = 0
        self.nbytes = 0


class _Upstream(asyncio.Protocol):
    """A connection to one replica; relays one response at a time to its client."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.client: _Client | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.head_only = False
        self.keep_alive = True
        self.closed = False
        self.got_bytes = False
        self.nbytes = 0
        self.idle_since = 0.0

    # protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is no subclass)

    def data_received(self, data: bytes) -> None:
        c = self.client
        if c is None:  # an idle pooled connection talking: drop it
            self.close()
            return
        self.got_bytes = True
        self.nbytes += len(data)
        c.write(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass
        except httptools.HttpParserError:
            self.keep_alive = False
            c.upstream_done(self, ok=False)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.discard(self)
        c = self.client
        if c is not None:
            c.upstream_done(self, ok=False)

    def pause_writing(self) -> None:
        if self.client is not None and self.client.transport is not None:
            self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.client is not None and self.client.transport is not None:
            self.client.transport.resume_reading()

    # parser callbacks
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.keep_alive and self.parser.should_keep_alive()
        if self.head_only and self.status >= 200:
            self._complete()

    def on_message_complete(self) -> None:
        if 100 <= self.status < 200:  # 100 Continue: the real answer follows
            return
        if not self.head_only:
            self._complete()

    def _complete(self) -> None:
        c = self.client
        if c is not None:
            c.upstream_done(self, ok=True)

    # use
    def start(self, client: _Client, head_only: bool) -> None:
        self.client = client
        self.head_only = head_only
        self.got_bytes = False
        self.nbytes = 0
        self.status = 0
        if head_only:  # a HEAD answer has no body whatever it says: parse it afresh
            self.parser = httptools.HttpResponseParser(self)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Pool:
    """Idle keep-alive connections to one replica."""

    def __init__(self, backend: Backend, lb: FastLoadBalancer) -> None:
        self.backend = backend
        self.lb = lb
        host, _, port = backend.url.removeprefix("http://").rpartition(":")
        self.host = host.strip("[]")
        self.port = int(port)
        self.idle: deque[_Upstream] = deque()

    def take(self) -> _Upstream | None:
        now = time.monotonic()
        while self.idle and now - self.idle[0].idle_since > POOL_IDLE_S:
            self.idle.popleft().close()
        while self.idle:
            u = self.idle.pop()
            if not u.closed and u.transport is not None and not u.transport.is_closing():
                return u
        return None

    async def connect(self) -> _Upstream:
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(lambda: _Upstream(self), self.host, self.port)
        return proto

    def give_back(self, u: _Upstream) -> None:
        u.client = None
        if u.closed or not u.keep_alive or len(self.idle) >= POOL_MAX or self.lb.pools.get(
                self.backend.replica_id) is not self:
            u.close()
            return
        u.idle_since = time.monotonic()
        self.idle.append(u)

    def discard(self, u: _Upstream) -> None:
        try:
            self.idle.remove(u)
        except ValueError:
            pass

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()


class _Client(asyncio.Protocol):
    """A client connection: requests one at a time (a pipelined one waits its turn)."""

    def __init__(self, lb: FastLoadBalancer) -> None:
        self.lb = lb
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[_Exchange] = deque()
        self.cur: _Exchange | None = None  # the exchange being parsed
        self.closed = False
        self.peer = b""

    # protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is no subclass)
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]).encode() if peer else b""

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._answer_and_close(_simple(501, "protocol upgrades are not proxied"))
        except httptools.HttpParserError:
            self._answer_and_close(_simple(400, "malformed request", close=True))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        while self.queue:
            ex = self.queue.popleft()
            if ex.up is not None:
                ex.status, ex.nbytes = ex.up.status, ex.up.nbytes
                ex.up.client = None
                ex.up.close()  # mid-response: that connection cannot be reused
            self._finish(ex)

    def pause_writing(self) -> None:
        ex = self.queue[0] if self.queue else None
        if ex is not None and ex.up is not None and ex.up.transport is not None:
            ex.up.transport.pause_reading()

    def resume_writing(self) -> None:
        ex = self.queue[0] if self.queue else None
        if ex is not None and ex.up is not None and ex.up.transport is not None:
            ex.up.transport.resume_reading()

    # parser callbacks
    def on_message_begin(self) -> None:
        self.cur = _Exchange()

    def on_url(self, url: bytes) -> None:
        assert self.cur is not None
        self.cur.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.cur is not None
        self.cur.headers.append((name, value))

    def on_headers_complete(self) -> None:
        ex = self.cur
        assert ex is not None
        ex.method = self.parser.get_method()
        ex.keep_alive = self.parser.should_keep_alive()
        lb = self.lb
        if lb.affinity_header_b is not None:
            for k, v in ex.headers:
                if k.lower() == lb.affinity_header_b:
                    ex.key = v
                    break
        for k, v in ex.headers:
            if k.lower() == b"transfer-encoding" and b"chunked" in v.lower():
                ex.chunked = True
        lb.count()
        ex.t0 = time.monotonic()
        self.queue.append(ex)
        if len(self.queue) == 1 and not self._waits_for_body(ex):
            self._dispatch(ex)

    def on_body(self, body: bytes) -> None:
        ex = self.cur
        assert ex is not None
        if ex.done:
            return  # already answered (early reply or 503): the rest is dropped
        framed = b"%x\r\n%b\r\n" % (len(body), body) if ex.chunked else body
        if ex.up is not None and ex.up.transport is not None:
            ex.up.transport.write(framed)
        else:
            ex.pending.append(framed)
            if ex.backend is None and self._head() is ex and not self._waits_for_body(ex):
                self._dispatch(ex)

    def on_message_complete(self) -> None:
        ex = self.cur
        assert ex is not None
        ex.complete = True
        if ex.done:
            return
        if ex.chunked:
            if ex.up is not None and ex.up.transport is not None:
                ex.up.transport.write(b"0\r\n\r\n")
            else:
                ex.pending.append(b"0\r\n\r\n")
        if ex.backend is None and self._head() is ex:
            self._dispatch(ex)

    def _head(self) -> _Exchange | None:
        return self.queue[0] if self.queue else None

    # the exchange
    def _waits_for_body(self, ex: _Exchange) -> bool:
        """Body-prefix affinity: hold the pick until the prefix (or the whole body) is in."""
        n = self.lb.affinity_body_prefix
        if not n or ex.key is not None or ex.complete or self.lb.policy.name != "affinity":
            return False
        return sum(len(p) for p in ex.pending) < n

    def _dispatch(self, ex: _Exchange) -> None:
        lb = self.lb
        if ex.key is None and lb.affinity_body_prefix and lb.policy.name == "affinity":
            raw = b"".join(ex.pending)
            ex.key = raw[: lb.affinity_body_prefix] or None
        b = lb.policy.pick(ex.tried, ex.key)
        if b is None:
            why = lb.reason if not lb.backends else "every ready replica refused the connection"
            self._local_answer(ex, _simple(503, f"service {lb.service}: {why}\n"))
            return
        ex.backend = b
        b.inflight += 1
        pool = lb.pool(b)
        up = pool.take()
        if up is not None:
            self._send(ex, up)
        else:
            lb.spawn_connect(self, ex, pool)

    def connected(self, ex: _Exchange, up: _Upstream | None) -> None:
        """A new upstream connection for ``ex`` (None: connecting failed)."""
        if ex.done or self.closed:
            if up is not None:
                up.pool.give_back(up)
            return
        if up is None:
            assert ex.backend is not None
            ex.tried.add(ex.backend)  # nothing went upstream: try another replica
            self._release(ex)
            self._dispatch(ex)
            return
        self._send(ex, up)

    def _send(self, ex: _Exchange, up: _Upstream) -> None:
        ex.up = up
        up.start(self, ex.method == b"HEAD")
        parts = [ex.method, b" ", ex.url, b" HTTP/1.1\r\n"]
        xff = b""
        for k, v in ex.headers:
            lk = k.lower()
            if lk == b"x-forwarded-for":
                xff = v + b", "
            if lk not in HOP:
                parts += [k, b": ", v, b"\r\n"]
        parts += [b"X-Forwarded-For: ", xff, self.peer, b"\r\n\r\n"]
        assert up.transport is not None
        up.transport.write(b"".join(parts) + b"".join(ex.pending))
        ex.pending.clear()
        ex.sent = True

    def upstream_done(self, up: _Upstream, *, ok: bool) -> None:
        ex = self.queue[0] if self.queue else None
        if ex is None or ex.up is not up:
            return
        self.queue.popleft()
        up.client = None
        ex.status, ex.nbytes = up.status, up.nbytes
        if ok and ex.complete:
            up.pool.give_back(up)
        else:
            up.close()
        if not ok and not up.got_bytes and not self.closed:
            self._reply(_simple(502, f"service {self.lb.service}: replica "
                                     f"{ex.backend.replica_id if ex.backend else '?'} closed the "
                                     "connection without answering\n"))
        elif not ok and self.transport is not None:
            self.transport.close()  # cut mid-response: the client must see it
        self._finish(ex)
        if (not ex.keep_alive or not ex.complete) and self.transport is not None:
            self.transport.close()  # (an unfinished request body cannot be skipped)
            return
        self._next()

    def _local_answer(self, ex: _Exchange, data: bytes) -> None:
        self.queue.popleft()
        ex.done = True
        self.lb.access.record(ex.t0, None, int(data[9:12]), len(data), ex.method, ex.url)
        self._reply(data)
        if not ex.complete or not ex.keep_alive:
            if self.transport is not None:  # an unread body: the connection cannot go on
                self.transport.close()
            return
        self._next()

    def _next(self) -> None:
        if self.queue:
            nxt = self.queue[0]
            if nxt.backend is None and not self._waits_for_body(nxt):
                self._dispatch(nxt)

    def _release(self, ex: _Exchange) -> None:
        if ex.backend is not None:
            ex.backend.inflight -= 1
            ex.backend = None

    def _finish(self, ex: _Exchange) -> None:
        if not ex.done:
            ex.done = True
            b = ex.backend
            if b is not None:
                b.served += 1
            if ex.t0:
                self.lb.access.record(ex.t0, b.replica_id if b is not None else None, ex.status,
                                      ex.nbytes, ex.method, ex.url)
            self._release(ex)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def _reply(self, data: bytes) -> None:
        self.write(data)

    def _answer_and_close(self, data: bytes) -> None:
        self.write(data)
        if self.transport is not None:
            self.transport.close()


class FastLoadBalancer(LoadBalancer):
    """LoadBalancer with the raw-protocol listener (same policies, counters, API)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        h = self.affinity_header
        self.affinity_header_b = h.lower().encode() if h else None
        self.pools: dict[int, _Pool] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def set_replicas(self, ready: Any, reason: str = "") -> None:
        super().set_replicas(ready, reason)
        for rid in [r for r, p in self.pools.items() if self.backends.get(r) is not p.backend]:
            self.pools.pop(rid).close()

    def pool(self, b: Backend) -> _Pool:
        p = self.pools.get(b.replica_id)
        if p is None or p.backend is not b:
            p = self.pools[b.replica_id] = _Pool(b, self)
        return p

    def count(self) -> None:
        self.total += 1
        self._times.append(time.monotonic())
        if len(self._times) > 1_000_000:
            self.qps()

    def spawn_connect(self, client: _Client, ex: _Exchange, pool: _Pool) -> None:
        async def go() -> None:
            try:
                up: _Upstream | None = await asyncio.wait_for(pool.connect(), 10)
            except (OSError, TimeoutError):
                up = None
            client.connected(ex, up)

        t = asyncio.get_running_loop().create_task(go())
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        loop = asyncio.get_running_loop()
        ctx: ssl.SSLContext | None = self.ssl_context
        server = await loop.create_server(lambda: _Client(self), self.host, self.port,
                                          ssl=ctx, reuse_address=True, backlog=1024)
        try:
            task_status.started()
            await anyio.sleep_forever()
        finally:
            server.close()
            for p in self.pools.values():
                p.close()
            for t in list(self._tasks):
                t.cancel()
