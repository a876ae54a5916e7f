"""The CLI's daemon client (stdlib http.client over AF_UNIX); see skyd.sdk.transport."""

from __future__ import annotations

from skyd.sdk.transport import (
    Client,
    UnixHTTPConnection,
    ensure_daemon,
    running_pid,
    socket_answers,
    stop_daemon,
)

__all__ = [
    "Client", "UnixHTTPConnection", "ensure_daemon", "running_pid", "socket_answers",
    "stop_daemon", "get_client",
]

_client: Client | None = None


def get_client() -> Client:
    """One shared client per CLI process (auto-starts the daemon on first use)."""
    global _client
    if _client is None:
        _client = Client()
    return _client
