"""A tiny model-server stand-in for serving tests: a real HTTP server on
``$SKYPILOT_SERVE_PORT`` (or argv[1]).

- ``GET /health``: 200 once ``READY_AFTER`` seconds (env, default 0) have passed
- ``GET /`` and ``POST /``: ``replica <id>`` (the body is read whole)
- ``GET /whoami``: JSON {"replica": id, "session": X-Session-Id header}
- ``GET /stream?n=5&delay=0.2``: ``n`` chunks ``token <i>\\n``, ``delay`` seconds apart
- ``POST /echo``: the request body streamed back chunk by chunk
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
READY_AFTER = float(os.environ.get("READY_AFTER") or 0)


async def health(request: web.Request) -> web.Response:
    if time.monotonic() - START < READY_AFTER:
        return web.Response(status=503, text="warming up")
    return web.Response(text="ok")


async def root(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(text=f"replica {RID}")


async def whoami(request: web.Request) -> web.Response:
    body = {"replica": RID, "session": request.headers.get("X-Session-Id")}
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


def main() -> None:
    port = int(sys.argv[1] if len(sys.argv) > 1 else os.environ["SKYPILOT_SERVE_PORT"])
    if os.environ.get("PID_DIR"):  # tests kill a replica's program through this
        with open(os.path.join(os.environ["PID_DIR"], f"{RID}.pid"), "w") as f:
            f.write(str(os.getpid()))
    app = web.Application()
    app.add_routes([web.get("/health", health), web.get("/", root), web.post("/", root),
                    web.get("/whoami", whoami), web.get("/stream", stream),
                    web.post("/echo", echo)])
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
