"""A tiny model-server stand-in for serving tests: a real HTTP server on
``$SKYPILOT_SERVE_PORT`` (or argv[1]).

- ``GET /health``: 200 once ``READY_AFTER`` seconds (env, default 0) have passed
- ``GET /`` and ``POST /``: ``replica <id>`` (the body is read whole)
- ``GET /whoami``: JSON {"replica": id, "session": X-Session-Id header}
- ``GET /stream?n=5&delay=0.2``: ``n`` chunks ``token <i>\\n``, ``delay`` seconds apart
- ``POST /echo``: the request body streamed back chunk by chunk
- ``GET /cut``: a response that breaks off mid-body
With ``PID_DIR`` set it writes ``<replica id>.pid`` there.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from aiohttp import web

RID = os.environ.get("SKYPILOT_SERVE_REPLICA_ID", "?")
START = time.monotonic()
RID_KEY = web.AppKey("rid", str)
READY_AFTER = float(os.environ.get("READY_AFTER") or 0)


async def health(request: web.Request) -> web.Response:
    if time.monotonic() - START < READY_AFTER:
        return web.Response(status=503, text="warming up")
    return web.Response(text="ok")


async def root(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(text=f"replica {request.app[RID_KEY]}")


async def whoami(request: web.Request) -> web.Response:
    body = {"replica": request.app[RID_KEY], "session": request.headers.get("X-Session-Id")}
    return web.Response(text=json.dumps(body), content_type="application/json")


async def stream(request: web.Request) -> web.StreamResponse:
    n = int(request.query.get("n", "5"))
    delay = float(request.query.get("delay", "0.2"))
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    for i in range(n):
        await resp.write(f"token {i} {time.time():.3f}\n".encode())
        await asyncio.sleep(delay)
    await resp.write_eof()
    return resp


async def echo(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    async for chunk in request.content.iter_any():
        await resp.write(chunk)
    await resp.write_eof()
    return resp


async def cut(request: web.Request) -> web.StreamResponse:
    """Starts a response, then drops the connection (a replica dying mid-answer)."""
    resp = web.StreamResponse()
    resp.content_length = 1000
    await resp.prepare(request)
    await resp.write(b"partial")
    assert request.transport is not None
    request.transport.close()
    return resp


def make_app(rid: str) -> web.Application:
    app = web.Application()
    app[RID_KEY] = rid
    app.add_routes([web.get("/health", health), web.get("/", root), web.post("/", root),
                    web.get("/whoami", whoami), web.get("/stream", stream),
                    web.post("/echo", echo), web.get("/cut", cut)])
    return app


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
    web.run_app(make_app(RID), host=host, port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
