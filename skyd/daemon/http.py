"""Small aiohttp helpers shared by the server and plugin reads."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from aiohttp import web

from skyd.daemon.store import dumps_finite
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
log = logging.getLogger("skyd.daemon.http")


def dumpb(obj: Any) -> bytes:
    return dumps_finite(obj).encode()


MAX_JSON_DEPTH = 64
MAX_ID = 2**63 - 1  # SQLite INTEGER


def json_input_problem(obj: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Why a decoded JSON body is refused, or None: nesting deeper than ``limit``
    containers, or a string that is not Unicode text (a lone surrogate such as ``\\udcff``).
    Iterative: any depth is safe to check."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, str):
            try:
                o.encode("utf-8")
            except UnicodeEncodeError:
                return "a string in it is not valid Unicode text (a lone surrogate escape)"
        elif isinstance(o, dict | list):
            if d > limit:
                return f"it nests deeper than {limit} levels"
            if isinstance(o, dict):
                stack.extend((k, d) for k in o)
                stack.extend((v, d + 1) for v in o.values())
            else:
                stack.extend((v, d + 1) for v in o)
    return None


def number(v: Any, field: str, *, lo: float, hi: float, integer: bool = False) -> float | None:
    """None, or a finite number in [lo, hi] (an integer when ``integer``)."""
    if v is None:
        return None
    ok = isinstance(v, int | float) and not isinstance(v, bool)
    if ok and isinstance(v, float) and not math.isfinite(v):
        ok = False
    if ok and integer and not float(v).is_integer():
        ok = False
    if not ok or not lo <= v <= hi:
        kind = "an integer" if integer else "a number"
        raise InvalidSpecError(f"{field} must be {kind} between {lo:g} and {hi:g}, got {v!r}",
                               field=field)
    return float(v)


def int_param(request: web.Request, name: str, default: int | None = None, *,
              lo: int = 0, hi: int = 2**63 - 1) -> int | None:
    """An integer from the query string or the route (``lo <= n <= hi``), else a 400 naming
    ``name``; ``default`` when absent or empty."""
    raw = request.match_info.get(name)
    if raw is None:
        raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        n = int(raw)
    except ValueError:
        raise InvalidSpecError(f"{name} must be an integer, got {raw[:40]!r}", field=name) from None
    if not lo <= n <= hi:
        raise InvalidSpecError(f"{name} must be between {lo} and {hi}, got {n}", field=name)
    return n


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumpb(obj), status=status, content_type=JSON_CT)


def http_status_for(err: SkydError) -> int:
    explicit = getattr(err, "http_status", None)
    if isinstance(explicit, int):
        return explicit
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
        await resp.write_eof()
    except ConnectionError:  # the follower left: normal, not an error
        log.info("%s %s: the client went away", request.method, request.path)
    return resp


async def text_chunks(path: Any, size: int = 256 * 1024) -> AsyncIterator[str]:
    """A saved log, read in a worker thread one chunk at a time (never whole: a job's log
    may be large), decoded as UTF-8 across chunk boundaries; nothing when it is missing."""
    import codecs

    import anyio

    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        f = await anyio.open_file(path, "rb")
    except FileNotFoundError:
        return
    async with f:
        while data := await f.read(size):
            if text := dec.decode(data):
                yield text
    if tail := dec.decode(b"", final=True):
        yield tail
