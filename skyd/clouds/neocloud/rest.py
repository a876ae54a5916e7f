"""A small JSON-over-HTTP client for provider REST APIs (aiohttp, one session per loop).

``RestClient.call`` sends one request and returns the decoded JSON. A 429 (and a 503 with a
Retry-After) is retried after the server's ``Retry-After`` seconds (capped, a few times);
any other status >= 300 raises :class:`APIError` with the status and the API's own words.
Signing schemes (Crusoe's HMAC) plug in as ``headers(method, path, query)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import anyio

REQUEST_TIMEOUT_S = 60.0
RETRIES = 5
MAX_RETRY_AFTER_S = 30.0

HeaderFn = Callable[[str, str, Mapping[str, str]], dict[str, str]]


@dataclass
class APIError(Exception):
    """A refusal: HTTP status, the API's error id/code and its message."""

    status: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}" if self.code else f"{self.status}: {self.message}"


def retry_after(value: str | None, default: float = 1.0) -> float:
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(value))) if value else default
    except ValueError:
        return default


class RestClient:
    def __init__(self, base: str, headers: HeaderFn) -> None:
        self.base = base.rstrip("/")
        self._headers = headers
        self._session: aiohttp.ClientSession | None = None
        self._loop: object = None
        self.calls = 0
        self.retried = 0

    def _ensure(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S))
            self._loop = loop
        return self._session

    async def call(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                   body: Any = None) -> Any:
        session = self._ensure()
        q = dict(params or {})
        for attempt in range(1, RETRIES + 1):
            self.calls += 1
            async with session.request(method, self.base + path, params=q or None, json=body,
                                       headers=self._headers(method, path, q)) as r:
                text = await r.text()
                wait = r.headers.get("Retry-After")
            data: Any
            try:
                import json

                data = json.loads(text) if text else {}
            except ValueError:
                data = {"message": text[:300]}
            if (r.status == 429 or (r.status == 503 and wait)) and attempt < RETRIES:
                self.retried += 1
                await anyio.sleep(retry_after(wait))
                continue
            if r.status >= 300:
                raise error_from(r.status, data)
            return data
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def error_from(status: int, data: Any) -> APIError:
    if isinstance(data, dict):
        inner = data.get("error")
        err: dict[str, Any] = inner if isinstance(inner, dict) else data
        code = str(err.get("id") or err.get("code") or "")
        msg = str(err.get("message") or err.get("error") or data)
        return APIError(status, code, " ".join(msg.split())[:400])
    return APIError(status, "", str(data)[:400])
