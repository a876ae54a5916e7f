"""skyd's Python SDK (blocking). ``skyd.sdk.aio`` has the same calls as coroutines.

Every call talks to the local daemon over its Unix socket (starting it when needed)::

    from skyd import sdk
    rid = sdk.submit("sleep", {"seconds": 1})
    for event in sdk.stream_and_get(rid): ...      # or: result = sdk.get_result(rid)
    sdk.status()                                    # clusters, from the daemon's state

Errors the daemon reports come back as the SkydError family (skyd.errors).
Stdlib only, so importing it is cheap.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from skyd import paths
from skyd.errors import SkydError, error_from_dict
from skyd.sdk.transport import Client, ensure_daemon, stop_daemon

__all__ = [
    "Client", "client", "get", "post", "delete", "submit", "stream_and_get", "get_result",
    "validate", "status", "requests_ls", "requests_get", "requests_cancel", "health",
    "version", "ensure_daemon", "stop_daemon", "result_of_event",
    # the CLI's verbs (skyd.sdk.verbs)
    "launch", "exec", "stop", "start", "down", "autostop", "cancel", "queue", "job_status",
    "tail_logs", "cost_report", "check", "jobs_launch", "jobs_queue", "jobs_cancel",
]

_client: Client | None = None


def client() -> Client:
    """The module's shared client (one keep-alive connection), for the current socket
    (a changed SKYD_SOCKET / SKYD_HOME gets a new client)."""
    global _client
    if _client is None or _client.socket_path != str(paths.socket_path()):
        if _client is not None:
            _client.close()
        _client = Client()
    return _client


def get(path: str, params: dict[str, Any] | None = None) -> Any:
    return client().get(path, params)


def post(path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
    return client().post(path, body, params)


def delete(path: str, params: dict[str, Any] | None = None) -> Any:
    return client().delete(path, params)


def submit(verb: str, payload: dict[str, Any] | None = None) -> str:
    """Start a mutating request; returns its id at once."""
    return client().submit(verb, payload)


def result_of_event(event: dict[str, Any]) -> Any:
    """The result of a terminal event; raises the SkydError of an error event."""
    if event.get("type") == "error":
        raise error_from_dict(event.get("error") or {})
    return event.get("result")


def stream_and_get(request_id: str, *, follow: bool = True) -> Generator[dict[str, Any], None, Any]:
    """Yield the request's events from its start (stage, log, job_log, partial, status),
    then return its result (``result = yield from stream_and_get(rid)``); raises the
    request's error as a SkydError. The terminal event is not yielded."""
    for ev in client().events(request_id, follow):
        if ev.get("type") in ("result", "error"):
            return result_of_event(ev)
        yield ev
    raise SkydError(f"request {request_id} has not finished", hint="follow it: skyd requests logs --follow")


def get_result(request_id: str) -> Any:
    """Block until the request ends; its result (or raise its error)."""
    gen = stream_and_get(request_id)
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def validate(yaml_text: str | None = None, *, path: str | Path | None = None,
             env: dict[str, str] | None = None, base_dir: str | Path | None = None) -> dict[str, Any]:
    """Normalize a task YAML (text, or a file ``path``) via the daemon:
    ``{"dag": normalized, "warnings": [...]}``."""
    if yaml_text is None:
        if path is None:
            raise SkydError("give yaml_text or path")
        yaml_text = Path(path).read_text()
        base_dir = base_dir or Path(path).resolve().parent
    body = {"yaml": yaml_text, "env": env or {}, "base_dir": str(base_dir or os.getcwd()),
            "path": str(path) if path else None}
    return dict(post("/v1/validate", body))


def status(names: list[str] | None = None, *, all_users: bool = False) -> list[dict[str, Any]]:
    """Clusters known to the daemon (from its state, no refresh); ``all_users``: every
    user's of a shared daemon (each row has its ``user``), not only yours."""
    params: dict[str, Any] = {"name": names} if names else {}
    if all_users:
        params["all_users"] = 1
    return list(get("/v1/status", params or None))


def requests_ls(status: list[str] | str | None = None, verb: str | None = None,
                limit: int = 100, *, all_users: bool = False) -> list[dict[str, Any]]:
    params: dict[str, Any] = {"status": status, "verb": verb, "limit": limit}
    if all_users:
        params["all_users"] = 1
    return list(get("/v1/requests", params))


def requests_get(request_id: str) -> dict[str, Any]:
    return dict(get(f"/v1/requests/{quote(request_id, safe='')}"))


def requests_cancel(request_id: str) -> dict[str, Any]:
    return dict(delete(f"/v1/requests/{quote(request_id, safe='')}"))


def health() -> dict[str, Any]:
    return dict(get("/v1/health"))


def version() -> dict[str, Any]:
    return dict(get("/v1/version"))


from skyd.sdk.verbs import (  # noqa: E402 - they use client() defined above
    autostop,
    cancel,
    check,
    cost_report,
    down,
    exec,
    job_status,
    jobs_cancel,
    jobs_launch,
    jobs_queue,
    launch,
    queue,
    start,
    stop,
    tail_logs,
)
