"""The load balancer of one service: an HTTP/1.1 reverse proxy inside the daemon.

One listener per service (aiohttp's low-level server, keep-alive), one client pool per
service (aiohttp connector, keep-alive to every replica). Bodies stream both ways chunk
by chunk, never buffered whole. A request goes to another replica only when connecting
to the chosen one failed (nothing went upstream); when no replica is ready the answer is
503 with the reason. Requests are counted in a sliding window for the autoscaler.
"""

from __future__ import annotations

import collections
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
import anyio
from aiohttp import web

from skyd.serve.access import AccessLog
from skyd.serve.policies import Backend, make_policy

HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length",
})  # fmt: skip


class LoadBalancer:
    def __init__(self, service: str, *, host: str, port: int, policy: str,
                 affinity_header: str | None = None, affinity_body_prefix: int | None = None,
                 stream_timeout: float | None = None, ssl_context: ssl.SSLContext | None = None,
                 qps_window: float = 60.0) -> None:
        self.service = service
        self.host = host
        self.port = port
        self.policy = make_policy(policy)
        self.policy.set_backends([])
        self.affinity_header = affinity_header
        self.affinity_body_prefix = affinity_body_prefix or 0
        self.stream_timeout = stream_timeout
        self.ssl_context = ssl_context
        self.qps_window = qps_window
        self.backends: dict[int, Backend] = {}
        self.reason = "no replica is ready yet"
        self._times: collections.deque[float] = collections.deque()
        self.total = 0
        self.access = AccessLog()
        self._session: aiohttp.ClientSession | None = None

    # -- controller side -------------------------------------------------------------
    def set_replicas(self, ready: Sequence[tuple[int, str, float]], reason: str = "") -> None:
        """The ready replicas as (replica_id, url, weight); counters of kept ones stay."""
        new: dict[int, Backend] = {}
        for rid, url, weight in ready:
            b = self.backends.get(rid)
            if b is None or b.url != url:
                b = Backend(rid, url.rstrip("/"), weight)
            b.weight = weight
            new[rid] = b
        self.backends = new
        self.policy.set_backends(list(new.values()))
        if reason:
            self.reason = reason

    def qps(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        cut = now - self.qps_window
        while self._times and self._times[0] < cut:
            self._times.popleft()
        return len(self._times) / self.qps_window

    def stats(self) -> dict[str, Any]:
        return {"qps": round(self.qps(), 3), "requests": self.total,
                "inflight": {b.replica_id: b.inflight for b in self.backends.values()},
                "served": {b.replica_id: b.served for b in self.backends.values()}}

    # -- the listener ----------------------------------------------------------------
    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, ttl_dns_cache=None)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10,
                                        sock_read=self.stream_timeout)
        self._session = aiohttp.ClientSession(connector=conn, timeout=timeout,
                                              auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar())  # fmt: skip
        server = web.Server(self._handle, access_log=None)
        runner = web.ServerRunner(server, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, ssl_context=self.ssl_context,
                               reuse_address=True, backlog=1024)
            await site.start()
            task_status.started()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await runner.cleanup()
                await self._session.close()

    async def _key(self, req: web.BaseRequest) -> tuple[bytes | None, bytes]:
        if self.affinity_header:
            v = req.headers.get(self.affinity_header)
            if v:
                return v.encode(), b""
        if self.affinity_body_prefix and req.can_read_body:
            head = b""
            while len(head) < self.affinity_body_prefix:
                chunk = await req.content.read(self.affinity_body_prefix - len(head))
                if not chunk:
                    break
                head += chunk
            return (head or None), head
        return None, b""

    async def _handle(self, req: web.BaseRequest) -> web.StreamResponse:
        t0 = time.monotonic()
        picked: list[int] = []
        resp: web.StreamResponse | None = None
        try:
            resp = await self._proxy(req, picked)
            return resp
        finally:
            status = resp.status if resp is not None else 0
            nbytes = (resp.body_length if resp.prepared else len(getattr(resp, "body", b"") or b"")
                      ) if resp is not None else 0
            self.access.record(t0, picked[-1] if picked else None, status, nbytes,
                               req.method.encode(), req.rel_url.raw_path.encode())

    async def _proxy(self, req: web.BaseRequest, picked: list[int]) -> web.StreamResponse:
        self.total += 1
        self._times.append(time.monotonic())
        if len(self._times) > 1_000_000:
            self.qps()
        key, head = (None, b"")
        if self.policy.name == "affinity":
            key, head = await self._key(req)
        assert self._session is not None
        has_body = req.can_read_body or bool(head)
        headers = {k: v for k, v in req.headers.items() if k.lower() not in HOP}
        if req.content_length is not None:
            headers["Content-Length"] = str(req.content_length)
        peer = req.remote or ""
        xff = req.headers.get("X-Forwarded-For")
        headers["X-Forwarded-For"] = f"{xff}, {peer}" if xff else peer
        body = _body(head, req) if has_body else None
        tried: set[Backend] = set()
        while True:
            b = self.policy.pick(tried, key)
            if b is None:
                why = self.reason if not self.backends else "every ready replica refused the connection"
                return web.Response(status=503, text=f"service {self.service}: {why}\n",
                                    headers={"X-Skyd-Reason": why})
            b.inflight += 1
            picked.append(b.replica_id)
            try:
                try:
                    up = await self._session.request(
                        req.method, b.url + req.rel_url.raw_path_qs, headers=headers, data=body,
                        allow_redirects=False, compress=None, chunked=None)
                except aiohttp.ClientConnectorError:
                    tried.add(b)  # nothing went upstream: another replica may take it
                    continue
                except (aiohttp.ClientError, TimeoutError) as e:
                    return web.Response(status=502, text=f"service {self.service}: replica "
                                        f"{b.replica_id} failed: {type(e).__name__}\n")
                async with up:
                    return await self._relay(req, up, b)
            finally:
                b.inflight -= 1

    async def _relay(self, req: web.BaseRequest, up: aiohttp.ClientResponse,
                     b: Backend) -> web.StreamResponse:
        resp = web.StreamResponse(status=up.status, reason=up.reason)
        for k, v in up.headers.items():
            if k.lower() not in HOP:
                resp.headers.add(k, v)
        if up.content_length is not None and "chunked" not in up.headers.get(
                "Transfer-Encoding", "").lower():
            resp.content_length = up.content_length
        try:
            await resp.prepare(req)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
        except (aiohttp.ClientError, ConnectionError, TimeoutError):
            # upstream broke mid-body: the client sees a cut response (never a retry);
            # or the client went away first (aiohttp's writer raises a ConnectionError)
            if req.transport is not None:
                req.transport.close()
            return resp
        await resp.write_eof()
        b.served += 1
        return resp


async def _body(head: bytes, req: web.BaseRequest) -> AsyncIterator[bytes]:
    if head:
        yield head
    async for chunk in req.content.iter_any():
        yield chunk
