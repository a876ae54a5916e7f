"""The aiohttp application: peer-uid guard, error mapping, routes, OpenAPI."""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pydantic
from aiohttp import web

from skyd import paths
from skyd.daemon import limits, owners
from skyd.daemon.connections import read_body
from skyd.daemon.context import ReadContext
from skyd.daemon.http import (
    MAX_JSON_DEPTH,
    error_response,
    int_param,
    internal_error_dict,
    json_input_problem,
    json_response,
)
from skyd.daemon.registry import READS, VERBS, Read
from skyd.daemon.requests import REQUEST_ID_HEADER, RequestManager, validation_error
from skyd.errors import InvalidSpecError, SkydError

if TYPE_CHECKING:
    from skyd.daemon.host import Host

log = logging.getLogger("skyd.daemon.server")

MAX_BODY = limits.MAX_BODY
_CRED = struct.Struct("3i")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# -- peer credentials ------------------------------------------------------------------
def peer_credentials(sock: Any) -> tuple[int, int, int] | None:
    """(pid, uid, gid) of the process at the other end of a Unix socket, or None."""
    try:
        if sock.family != socket.AF_UNIX:
            return None
        return tuple(_CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)))  # type: ignore[return-value]
    except (OSError, AttributeError):
        return None


def peer_allowed(peer_uid: int | None, daemon_uid: int,
                 access: owners.Access | None = None) -> bool:
    """The daemon's own uid may talk to it, and (a shared daemon) the members of its shared
    group; unknown peers are refused."""
    if peer_uid is None:
        return False
    if access is None:
        return peer_uid == daemon_uid
    return access.caller(peer_uid) is not None


def build_app(daemon: Host, rm: RequestManager) -> web.Application:
    uid = os.getuid()
    access: owners.Access = getattr(daemon, "access", None) or owners.Access()

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        creds = peer_credentials(sock) if sock is not None else None
        caller = access.caller(creds[1]) if creds else None
        if caller is None:
            log.warning("refused peer %s (daemon uid %d)", creds, uid)
            return json_response(
                {"error": {"type": "PermissionError", "exit_code": 1, "field": None, "line": None,
                           "message": "permission denied: this skyd daemon belongs to another user",
                           "hint": "start your own daemon (SKYD_HOME / SKYD_SOCKET), or ask its "
                                   "owner to share it with a group you are in (--shared-group)"}},
                403)
        request["skyd_caller"] = caller
        token = owners.CALLER.set(caller)
        try:
            return await handler(request)
        except SkydError as e:
            return error_response(e)
        except RecursionError:
            return error_response(InvalidSpecError("the input nests too deeply", field="body",
                                                   hint="flatten it"))
        except web.HTTPException as e:
            if e.status >= 400:
                err = SkydError(e.reason or "http error", hint=e.text if e.status == 413 else None)
                return json_response({"error": err.to_dict() | {"type": "HTTPError"}}, e.status)
            raise
        except Exception as e:  # noqa: BLE001
            log.error("%s %s failed:\n%s", request.method, request.path, traceback.format_exc())
            return json_response({"error": internal_error_dict(e, str(paths.daemon_log()))}, 500)
        finally:
            owners.CALLER.reset(token)

    app = web.Application(client_max_size=MAX_BODY, middlewares=[guard])
    app["daemon"] = daemon

    async def submit(request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        rid, created = await rm.submit_idempotent(
            request.match_info["verb"], body, request.headers.get(REQUEST_ID_HEADER) or None)
        return json_response({"request_id": rid, "created": created}, 201 if created else 200)

    async def req_ls(request: web.Request) -> web.StreamResponse:
        q = request.query
        statuses = [s for s in q.get("status", "").split(",") if s]
        limit = int(int_param(request, "limit", 100, lo=1, hi=1_000_000) or 100)
        caller = request["skyd_caller"]
        user = None if owners.wants_all(q) else caller.name
        rows = await rm.ls(statuses or None, q.get("verb") or None, limit, False, user=user)
        return json_response(rows)

    async def own_request(request: web.Request, verb: str) -> str:
        rid = await rm.resolve(request.match_info["id"])
        await owners.check_owned(daemon.store, request["skyd_caller"], "request", [rid], verb)
        return rid

    async def req_get(request: web.Request) -> web.StreamResponse:
        return json_response(await rm.get(await own_request(request, "read")))

    async def req_cancel(request: web.Request) -> web.StreamResponse:
        return json_response(await rm.cancel(await own_request(request, "cancel")))

    async def req_events(request: web.Request) -> web.StreamResponse:
        follow = request.query.get("follow", "0") not in ("0", "false", "")
        rid = await own_request(request, "read")  # 404/403 before the stream starts
        return await _stream_lines(request, rm.events(rid, follow))

    async def openapi(request: web.Request) -> web.StreamResponse:
        from skyd.daemon.openapi import build_openapi

        return json_response(build_openapi())

    app.router.add_post("/v1/requests/{verb}", submit)
    app.router.add_get("/v1/requests", req_ls)
    app.router.add_get("/v1/requests/{id}", req_get)
    app.router.add_delete("/v1/requests/{id}", req_cancel)
    app.router.add_get("/v1/requests/{id}/events", req_events)
    app.router.add_get("/v1/openapi.json", openapi)
    for read in READS.values():
        app.router.add_route(read.method, read.path, _read_handler(daemon, read))
    return app


async def _json_body(request: web.Request) -> Any:
    try:
        raw = await read_body(request)
    except web.HTTPRequestEntityTooLarge:
        raise limits.PayloadTooLargeError(
            f"the request body is too large: over {MAX_BODY // (1024 * 1024)} MiB", field="body",
            hint="a task's run/setup, envs and paths fit easily; put data in files "
                 "(workdir, file_mounts)") from None
    if not raw.strip():
        return None
    deep = False
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        body, deep = None, True
    except ValueError as e:
        raise InvalidSpecError(f"request body is not valid JSON: {e}", field="body") from None
    problem = f"it nests deeper than {MAX_JSON_DEPTH} levels" if deep else json_input_problem(body)
    if problem is not None:
        raise InvalidSpecError(f"request body refused: {problem}", field="body",
                               hint="send plain JSON text of reasonable depth") from None
    limits.check_sizes(body)
    return body


def _no_constant(name: str) -> Any:
    """JSON has no Infinity/NaN: a body that uses them is refused (400)."""
    raise ValueError(f"{name} is not a JSON number")


async def _stream_lines(request: web.Request, chunks: Any) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    try:
        async for chunk in chunks:
            await resp.write(chunk)
        await resp.write_eof()
    except ConnectionError:
        pass
    return resp


def _read_handler(daemon: Host, read: Read) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        body: Any = None
        if request.method in ("POST", "PUT", "PATCH") and not read.raw_body:
            body = await _json_body(request)
            if read.body is not None:
                try:
                    body = read.body.model_validate(body or {}).model_dump(mode="json")
                except pydantic.ValidationError as e:
                    raise validation_error(e, read.path) from None
        caller = request.get("skyd_caller")
        named = owners.NAMED.get(read.path)
        if named is not None:
            key: Any = request.match_info.get(named[1])
            if owners.KINDS[named[0]].int_keys and isinstance(key, str) and key.isdigit():
                key = int(key)
            await owners.check_owned(daemon.store, caller, named[0], [key], "read")
        out = await read.handler(ReadContext(daemon, body), request)
        if read.path in owners.LISTINGS:
            if type(out) is web.Response and out.body is not None:
                out = json.loads(bytes(out.body))  # type: ignore[arg-type]
            if not isinstance(out, web.StreamResponse):
                out = await owners.filter_listing(daemon.store, caller, read.path, out,
                                                  owners.wants_all(request.query))
        if isinstance(out, web.StreamResponse):
            return out
        return json_response(out)

    handle.__name__ = f"read_{read.method}_{read.path}"
    return handle


__all__ = ["build_app", "peer_allowed", "peer_credentials", "VERBS"]
