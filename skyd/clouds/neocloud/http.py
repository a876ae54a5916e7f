"""The one JSON client over aiohttp for provider REST/GraphQL APIs.

`JSONClient.request` sends one call and returns the decoded JSON. Authentication plugs in
as ``headers()`` (a key in a header, read per request so a rotated key is picked up) and,
for APIs that sign each request (Crusoe's HMAC), ``sign(method, path, query)`` whose
headers are added to those. 429 and 503 answers are
retried after the server's ``Retry-After`` (seconds or an HTTP date; a default backoff when
absent), at most `max_retries` times and never waiting longer than `max_wait_s` in one go;
then, and for every other status >= 400, `APIError` is raised with the status, the
provider's code and message, and the last Retry-After. The session is made in the running
loop (one per loop), so one client serves the daemon and tests that run several loops.
The key is sent in a header only: it never appears in an error's text.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import anyio

from skyd import settings as knobs

RETRY_STATUSES = frozenset({429, 503})
DEFAULT_BACKOFF_S = 1.0


class APIError(Exception):
    """A refusal from a provider's API."""

    def __init__(self, provider: str, status: int, message: str, *, code: str = "",
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.message = " ".join(str(message).split())[:500]
        self.code = code
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"HTTP {self.status}" + (f" {self.code}" if self.code else "") + (
            f": {self.message}" if self.message else "")


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds from now (delta-seconds or an HTTP date), None if absent."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_text(body: Any) -> tuple[str, str]:
    """(code, message) from the usual error bodies: {"error": "..."}, {"error": {...}},
    {"message": ...}, {"detail": ...}, {"errors": [{"message": ...}]} (GraphQL)."""
    if isinstance(body, str):
        return "", body
    if not isinstance(body, dict):
        return "", str(body)[:300]
    err = body.get("error")
    if isinstance(err, dict):
        return str(err.get("code") or err.get("status") or ""), str(err.get("message") or err)
    errs = body.get("errors")
    if isinstance(errs, list) and errs:
        e0: dict[str, Any] = errs[0] if isinstance(errs[0], dict) else {"message": str(errs[0])}
        ext = e0.get("extensions") or {}
        return str(ext.get("code") or e0.get("code") or ""), "; ".join(
            str(e.get("message") if isinstance(e, dict) else e) for e in errs)
    for k in ("error", "message", "detail", "error_message"):
        if body.get(k):
            return str(body.get("code") or body.get("id") or ""), str(body[k])
    return "", str(body)[:300]


def base_url(env: str, default: str) -> str:
    """A provider's base URL: ``$env`` (tests, proxies) or the public default."""
    return (str(knobs.knob(env).get() or "") or default).rstrip("/")


#: A request signer: (METHOD, path as passed to `request`, query) -> headers to add.
SignFn = Callable[[str, str, Mapping[str, str]], Mapping[str, str]]


class JSONClient:
    """One provider API: ``base`` URL, auth headers from ``headers()`` (called per request,
    so a rotated key is picked up) plus those of ``sign`` (per request, for signed APIs),
    retries on 429/503 with Retry-After."""

    def __init__(self, provider: str, base: str, headers: Callable[[], Mapping[str, str]], *,
                 sign: SignFn | None = None, timeout_s: float = 60.0, max_retries: int = 4,
                 max_wait_s: float = 30.0) -> None:
        self.provider = provider
        self.base = base.rstrip("/")
        self._headers = headers
        self._sign = sign
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_wait_s = max_wait_s
        self._session: aiohttp.ClientSession | None = None
        self._loop: object = None
        self.calls = 0
        self.waited_s = 0.0  # total time spent honouring Retry-After

    def _ensure(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
            self._loop = loop
        return self._session

    async def request(self, method: str, path: str, *, json: Any = None,
                      params: Mapping[str, str] | None = None) -> Any:
        session = self._ensure()
        url = path if path.startswith("http") else (
            f"{self.base}/{path.lstrip('/')}" if path else self.base)
        attempt = 0
        while True:
            self.calls += 1
            headers = dict(self._headers())
            if self._sign is not None:  # signed anew on every try (a timestamp is in it)
                headers.update(self._sign(method, path, dict(params or {})))
            async with session.request(method, url, json=json, params=params or None,
                                       headers=headers) as r:
                text = await r.text()
                retry_after = parse_retry_after(r.headers.get("Retry-After"))
                status = r.status
            data: Any
            try:
                import json as _json

                data = _json.loads(text) if text.strip() else None
            except ValueError:
                data = text[:300]
            if status in RETRY_STATUSES and attempt < self.max_retries:
                wait = min(self.max_wait_s, retry_after if retry_after is not None
                           else DEFAULT_BACKOFF_S * 2 ** attempt)
                attempt += 1
                self.waited_s += wait
                await anyio.sleep(wait)
                continue
            if status >= 400:
                code, msg = error_text(data)
                raise APIError(self.provider, status, msg, code=code, retry_after=retry_after)
            return data

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
