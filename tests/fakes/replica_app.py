"""A tiny model-server stand-in for serving tests: a real HTTP/1.1 server on
``$SKYPILOT_SERVE_PORT`` (or argv[1]).

- ``GET /health``: 503 ``warming up`` until ``READY_AFTER`` seconds (env, default 0) have
  passed, then 200 ``ok``
- ``GET /`` and ``POST /``: ``replica <id>`` (the body is read whole)
- ``GET /whoami``: JSON {"replica": id, "session": X-Session-Id header}
- ``GET /stream?n=5&delay=0.2``: ``n`` chunks ``token <i> <time.time()>\\n``, ``delay``
  seconds apart, each sent as it is made
- ``POST /echo``: the request body streamed back chunk by chunk as it arrives
- ``GET /cut``: a response that breaks off mid-body (Content-Length 1000, 7 bytes, dropped)
With ``PID_DIR`` set it writes ``<replica id>.pid`` there. SIGTERM ends it (exit status 0).

Standard library only (asyncio streams): the tests start it as a replica's program dozens of
times a run, and importing aiohttp cost most of a start. Keep-alive, pipelining, request
bodies with Content-Length or chunked; answers of unknown length are chunked. In process
(tests/serve/test_serve_lb.py), ``async with serving(rid) as url:`` serves one replica on
the running event loop.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # A replica's program never speaks TLS: asyncio runs without the ssl module (an import of
    # None fails), and not loading OpenSSL saves ~15 ms CPU a start.
    sys.modules.setdefault("ssl", None)  # type: ignore[arg-type]

import asyncio
import contextlib
import json
import os
import signal
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable

RID = os.environ.get("SKYPILOT_SERVE_REPLICA_ID", "?")
START = time.monotonic()
READY_AFTER = float(os.environ.get("READY_AFTER") or 0)
TEXT = "text/plain; charset=utf-8"
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           431: "Request Header Fields Too Large", 500: "Internal Server Error",
           503: "Service Unavailable"}


class Request:
    """One request: its head parsed, its body still on the connection (``chunks``/``read``)."""

    def __init__(self, rid: str, method: str, target: str, headers: dict[str, str],
                 reader: asyncio.StreamReader) -> None:
        self.rid = rid
        self.method = method
        self.path, _, qs = target.partition("?")
        self.query = dict(kv.partition("=")[::2] for kv in qs.split("&") if kv)
        self.headers = headers  # names lower-cased
        self._reader = reader
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._left = 0 if self._chunked else int(headers.get("content-length") or 0)
        self.body_done = not self._chunked and self._left == 0

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, de-chunked; the connection is left at the next request."""
        r = self._reader
        while not self.body_done:
            if self._chunked and not self._left:
                size = int((await r.readuntil(b"\r\n")).split(b";", 1)[0], 16)
                if size == 0:
                    while await r.readuntil(b"\r\n") != b"\r\n":  # trailers
                        pass
                    self.body_done = True
                    return
                self._left = size
            data = await r.read(min(self._left, 65536))
            if not data:
                raise ConnectionResetError("request body cut short")
            self._left -= len(data)
            if not self._left:
                if self._chunked:
                    await r.readexactly(2)
                else:
                    self.body_done = True
            yield data

    async def read(self) -> bytes:
        return b"".join([c async for c in self.chunks()])


class Response:
    """Either ``send`` (a whole answer) or ``start``, ``write``..., ``end`` (streamed:
    chunked unless a length is given); ``abort`` drops the connection."""

    def __init__(self, writer: asyncio.StreamWriter, http11: bool, keep_alive: bool,
                 head_only: bool) -> None:
        self._w = writer
        self._http11 = http11
        self.keep_alive = keep_alive
        self._head_only = head_only
        self._chunked = False
        self.started = False

    def _head(self, status: int, ctype: str, framing: str) -> bytes:
        self.started = True
        conn = ("" if self.keep_alive == self._http11
                else "Connection: keep-alive\r\n" if self.keep_alive else "Connection: close\r\n")
        return (f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\nContent-Type: {ctype}\r\n"
                f"{framing}{conn}\r\n").encode("latin-1")

    def send(self, status: int, body: bytes, ctype: str = TEXT, extra: str = "") -> None:
        head = self._head(status, ctype, f"Content-Length: {len(body)}\r\n{extra}")
        self._w.write(head if self._head_only else head + body)

    async def start(self, status: int = 200, ctype: str = "application/octet-stream",
                    length: int | None = None) -> None:
        if length is not None:
            framing = f"Content-Length: {length}\r\n"
        elif self._http11:
            framing, self._chunked = "Transfer-Encoding: chunked\r\n", True
        else:  # HTTP/1.0: the end of the body is the end of the connection
            framing, self.keep_alive = "", False
        self._w.write(self._head(status, ctype, framing))
        await self._w.drain()

    async def write(self, data: bytes) -> None:
        if not data or self._head_only:
            return
        self._w.write(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data)
        await self._w.drain()

    async def end(self) -> None:
        if self._chunked and not self._head_only:
            self._w.write(b"0\r\n\r\n")
            await self._w.drain()

    def abort(self) -> None:
        self.keep_alive = False
        self._w.close()


Handler = Callable[[Request, Response], Awaitable[None]]


async def health(req: Request, resp: Response) -> None:
    if time.monotonic() - START < READY_AFTER:
        resp.send(503, b"warming up")
    else:
        resp.send(200, b"ok")


async def root(req: Request, resp: Response) -> None:
    await req.read()
    resp.send(200, f"replica {req.rid}".encode())


async def whoami(req: Request, resp: Response) -> None:
    body = {"replica": req.rid, "session": req.headers.get("x-session-id")}
    resp.send(200, json.dumps(body).encode(), "application/json; charset=utf-8")


async def stream(req: Request, resp: Response) -> None:
    n = int(req.query.get("n", "5"))
    delay = float(req.query.get("delay", "0.2"))
    await resp.start(ctype="text/plain")
    for i in range(n):
        await resp.write(f"token {i} {time.time():.3f}\n".encode())
        await asyncio.sleep(delay)
    await resp.end()


async def echo(req: Request, resp: Response) -> None:
    await resp.start()
    async for chunk in req.chunks():
        await resp.write(chunk)
    await resp.end()


async def cut(req: Request, resp: Response) -> None:
    """Starts an answer, then drops the connection (a replica dying mid-answer)."""
    await resp.start(length=1000)
    await resp.write(b"partial")
    resp.abort()


ROUTES: dict[str, dict[str, Handler]] = {
    "/health": {"GET": health}, "/": {"GET": root, "POST": root}, "/whoami": {"GET": whoami},
    "/stream": {"GET": stream}, "/echo": {"POST": echo}, "/cut": {"GET": cut}}


async def _connection(rid: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
    """Answers the requests of one connection in turn until either side closes it."""
    resp: Response | None = None
    try:
        while True:
            resp = None
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return  # the client closed the connection
            except asyncio.LimitOverrunError:
                Response(writer, True, False, False).send(431, b"request head too large")
                return
            text = head.decode("latin-1").lstrip("\r\n")  # blank lines before a request
            if not text:
                continue
            lines = text.split("\r\n")
            method, target, version = lines[0].split(" ")
            headers = {}
            for line in lines[1:-2]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            http11 = version == "HTTP/1.1"
            conn = headers.get("connection", "").lower()
            keep = "close" not in conn if http11 else "keep-alive" in conn
            req = Request(rid, method, target, headers, reader)
            resp = Response(writer, http11, keep, method == "HEAD")
            if not req.body_done and headers.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            methods = ROUTES.get(req.path)
            handler = methods.get("GET" if method == "HEAD" else method) if methods else None
            if handler is not None:
                await handler(req, resp)
            elif methods:
                allow = ",".join([*methods, "HEAD"] if "GET" in methods else methods)
                resp.send(405, b"405: Method Not Allowed", extra=f"Allow: {allow}\r\n")
            else:
                resp.send(404, b"404: Not Found")
            if not resp.keep_alive:
                return
            async for _ in req.chunks():  # a body the handler left unread
                pass
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass  # the client went away (or cut its request short)
    except Exception as e:  # noqa: BLE001 - the connection ends; the server serves on
        if resp is None and isinstance(e, ValueError):  # a request head it cannot parse
            Response(writer, True, False, False).send(400, b"400: Bad Request")
        else:  # a handler's error (e.g. /stream?n=x): logged, and a 500 as aiohttp does
            traceback.print_exc()
            if resp is not None and not resp.started:
                resp.keep_alive = False
                resp.send(500, b"500: Internal Server Error")
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def serving(rid: str, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serves replica ``rid`` on the running event loop; yields its URL (``port`` 0: a free
    one). On exit: stops listening and ends the open connections."""
    conns: set[asyncio.Task[None]] = set()
    closing = False

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if closing:  # accepted just before the server closed
            writer.close()
            return
        conns.add(task)
        try:
            await _connection(rid, reader, writer)
        except asyncio.CancelledError:
            pass  # by serving()'s exit (a cancelled task here, asyncio would log as an error)
        finally:
            conns.discard(task)

    server = await asyncio.start_server(on_connect, host, port, backlog=1024)
    try:
        yield f"http://{host}:{server.sockets[0].getsockname()[1]}"
    finally:
        closing = True
        server.close()
        left = list(conns)
        for t in left:
            t.cancel()
        await asyncio.gather(*left, return_exceptions=True)
        await server.wait_closed()


async def _serve(host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with serving(RID, host, port):
        await stop.wait()


def main() -> None:
    port = int(sys.argv[1] if len(sys.argv) > 1 else os.environ["SKYPILOT_SERVE_PORT"])
    if os.environ.get("PID_DIR"):  # tests kill a replica's program through this
        with open(os.path.join(os.environ["PID_DIR"], f"{RID}.pid"), "w") as f:
            f.write(str(os.getpid()))
    # A node's own address (on `local`, each node has one: SKYPILOT_NODE_IPS), as an app on a
    # VM listens where the load balancer reaches it.
    ips = (os.environ.get("SKYPILOT_NODE_IPS") or "").split()
    rank = int(os.environ.get("SKYPILOT_NODE_RANK") or 0)
    host = ips[rank] if rank < len(ips) else "127.0.0.1"
    asyncio.run(_serve(host, port))


if __name__ == "__main__":
    main()
