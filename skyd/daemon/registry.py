"""The verb and read registries: how other packages plug into the daemon.

A *verb* mutates state and becomes a request (row + log + events, answered at once with
its id): ``POST /v1/requests/{name}``. A *read* answers from SQLite with no request row:
``register_read("GET", "/v1/queue/{cluster}", handler)``.

Registration happens at import of a plugin module listed in
:data:`skyd.daemon.plugins.PLUGIN_MODULES` (or ``$SKYD_EXTRA_PLUGINS``, comma separated).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pydantic
    from aiohttp import web

    from skyd.daemon.context import ReadContext, RequestContext
    from skyd.daemon.host import Host

VerbHandler = Callable[["RequestContext", dict[str, Any]], Awaitable[Any]]
VerbCheck = Callable[[dict[str, Any]], Awaitable[None]]
ReadHandler = Callable[["ReadContext", "web.Request"], Awaitable[Any]]


@dataclass
class Verb:
    name: str
    handler: VerbHandler
    resumable: bool = False
    body: type[pydantic.BaseModel] | None = None
    summary: str = ""
    check: VerbCheck | None = None


@dataclass
class Read:
    method: str
    path: str
    handler: ReadHandler
    body: type[pydantic.BaseModel] | None = None
    response: type[pydantic.BaseModel] | None = None
    summary: str = ""
    raw_body: bool = False  # the handler reads the request body itself (a byte stream)


VERBS: dict[str, Verb] = {}
READS: dict[tuple[str, str], Read] = {}
STARTUP_HOOKS: list[Callable[[Host], Awaitable[None]]] = []
SHUTDOWN_HOOKS: list[Callable[[Host], Awaitable[None]]] = []


def on_startup(fn: Callable[[Host], Awaitable[None]]) -> None:
    """At import of a plugin: run ``await fn(daemon)`` at daemon start, after request
    reconciliation and before the socket opens (e.g. resume managed-job controllers
    with ``daemon.spawn``)."""
    STARTUP_HOOKS.append(fn)


def on_shutdown(fn: Callable[[Host], Awaitable[None]]) -> None:
    """Run ``await fn(daemon)`` at daemon stop, after requests are cancelled."""
    SHUTDOWN_HOOKS.append(fn)


def register_verb(
    name: str,
    handler: VerbHandler,
    *,
    resumable: bool = False,
    body: type[pydantic.BaseModel] | None = None,
    summary: str = "",
    replace: bool = False,
    check: VerbCheck | None = None,
) -> None:
    """Register a mutating verb. ``name`` may contain dots (``jobs.launch``), not slashes.

    ``body``: pydantic model the payload is validated against before the request is
    created (a validation error answers 400 / exit code 2; no request row). The handler
    receives the validated payload as a plain dict (``model_dump(mode="json")``).
    ``resumable``: if the daemon dies while the request runs, the next daemon re-invokes
    the handler with the same payload and ``ctx.resumed = True`` instead of failing it.
    ``check``: ``await check(payload)`` runs before the request is created and raises a
    SkydError for a payload the handler would refuse (answered 400 / exit 2, no request
    row); a resumed request is checked again first and failed, not resumed, if it fails.
    """
    if "/" in name or not name:
        raise ValueError(f"bad verb name {name!r}: no slashes")
    if name in VERBS and VERBS[name].handler is not handler and not replace:
        raise ValueError(f"verb {name!r} registered twice")
    VERBS[name] = Verb(name, handler, resumable, body, summary or (handler.__doc__ or "").strip(),
                       check)


def register_read(
    method: str,
    path: str,
    handler: ReadHandler,
    *,
    body: type[pydantic.BaseModel] | None = None,
    response: type[pydantic.BaseModel] | None = None,
    summary: str = "",
    replace: bool = False,
    raw_body: bool = False,
) -> None:
    """Register a read endpoint. ``path`` is an aiohttp route (``/v1/x/{name}``); a path
    without the ``/v1`` prefix gets it. The handler gets ``(ReadContext, aiohttp request)``
    and returns something JSON-able (answered 200 JSON) or an ``aiohttp.web.StreamResponse``.
    A raised SkydError answers with its error dict and an HTTP status by type.
    ``body``/``response`` only document the endpoint in /v1/openapi.json (and ``body`` is
    validated: ``ctx.body`` holds the validated model's dict). ``replace=True``
    supersedes an earlier registration (e.g. a richer ``GET /v1/status``). ``raw_body``:
    the body is not JSON; the handler streams it from ``request.content`` (and bounds it).
    """
    method = method.upper()
    if not path.startswith("/v1/"):
        path = "/v1/" + path.lstrip("/")
    key = (method, path)
    if key in READS and READS[key].handler is not handler and not replace:
        raise ValueError(f"read {method} {path} registered twice")
    READS[key] = Read(method, path, handler, body, response,
                      summary or (handler.__doc__ or "").strip(), raw_body)
