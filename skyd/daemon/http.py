"""Small aiohttp helpers shared by the server and plugin reads."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable
from typing import Any

from aiohttp import web

from skyd.errors import (
    ClusterStateError,
    CredentialsError,
    DaemonUnavailableError,
    InvalidSpecError,
    NotFoundError,
    ResourcesUnavailableError,
    SkydError,
)

JSON_CT = "application/json"
NDJSON_CT = "application/x-ndjson"


def dumpb(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), default=str).encode()


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumpb(obj), status=status, content_type=JSON_CT)


def http_status_for(err: SkydError) -> int:
    if isinstance(err, NotFoundError):
        return 404
    if isinstance(err, InvalidSpecError):
        return 400
    if isinstance(err, ClusterStateError):
        return 409
    if isinstance(err, DaemonUnavailableError):
        return 503
    if isinstance(err, CredentialsError | ResourcesUnavailableError):
        return 422
    return 400


def error_response(err: SkydError, status: int | None = None) -> web.Response:
    return json_response({"error": err.to_dict()}, status or http_status_for(err))


def internal_error_dict(exc: BaseException, log_hint: str) -> dict[str, Any]:
    from skyd.daemon.store import storage_error

    known = storage_error(exc)
    if known is not None:  # a full disk or a read-only state database: say which
        return known.to_dict()
    return {
        "type": "InternalError",
        "message": f"internal error: {type(exc).__name__}: {exc}",
        "field": None,
        "hint": f"details in the daemon log: {log_hint}",
        "line": None,
        "exit_code": 1,
    }


async def stream_ndjson(request: web.Request, items: AsyncIterable[Any]) -> web.StreamResponse:
    """A chunked ndjson response; one JSON document per line, flushed as produced."""
    resp = web.StreamResponse(headers={"Content-Type": NDJSON_CT, "Cache-Control": "no-cache"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    try:
        async for item in items:
            data = item if isinstance(item, bytes) else dumpb(item) + b"\n"
            await resp.write(data)
    except (ConnectionResetError, ConnectionError):
        return resp
    await resp.write_eof()
    return resp
