"""The Compute Engine REST API over aiohttp, authorised by gcloud-aio-auth.

``ComputeAPI.call`` sends one request under ``projects/<project>/`` and returns the JSON;
a refusal raises :class:`GCEError` (HTTP status plus every ``errors[].code``/``reason`` and
message, the words `classify` reads). ``wait`` polls a zonal or global operation with the
API's own ``.../operations/<name>/wait`` (which answers when the operation is done, or after
about two minutes) until it is DONE, and raises its error as a GCEError too.

The token comes from gcloud-aio-auth's ``Token.refresh`` (service accounts sign a JWT, user
credentials use their refresh token), called once per expiry by this module: the library's
own retry loop (five tries, up to a minute of backoff) would turn a revoked key into a
minute-long ``skyd check``.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import anyio

from skyd.clouds.gcp.config import LOGIN_HINT, Credentials, compute_url, token_url
from skyd.errors import CredentialsError

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
REQUEST_TIMEOUT_S = 60.0


@dataclass
class GCEError(Exception):
    """A refusal from the API: the HTTP status and each error's code and message."""

    status: int
    errors: list[tuple[str, str]] = field(default_factory=list)  # (code or reason, message)

    def __str__(self) -> str:
        return "; ".join(f"{c}: {m}" for c, m in self.errors) or f"HTTP {self.status}"

    @property
    def codes(self) -> list[str]:
        return [c for c, _ in self.errors]

    @classmethod
    def from_body(cls, status: int, body: Any) -> GCEError:
        err = body.get("error") if isinstance(body, dict) else None
        if not isinstance(err, dict):
            return cls(status, [(f"HTTP_{status}", str(body)[:300])])
        out: list[tuple[str, str]] = []
        for e in err.get("errors") or []:
            code = str(e.get("code") or e.get("reason") or err.get("status") or status)
            out.append((code, str(e.get("message") or err.get("message") or "")))
        if not out:
            out.append((str(err.get("status") or err.get("code") or status), str(err.get("message") or "")))
        return cls(int(err.get("code") or status) if str(err.get("code", "")).isdigit() else status, out)


class TokenSource:
    """Access tokens for one set of credentials (cached until shortly before expiry)."""

    def __init__(self, creds: Credentials, session: aiohttp.ClientSession) -> None:
        from gcloud.aio.auth import Token  # heavy (JWT, cryptography): only when used

        data = dict(creds.data)
        if token_url():
            data["token_uri"] = token_url()
        self.creds = creds
        self._token = Token(service_file=io.StringIO(json.dumps(data)), session=session,  # type: ignore[arg-type]
                            scopes=SCOPES)
        self._value: str | None = None
        self._until = 0.0
        self._lock = anyio.Lock()

    def invalidate(self) -> None:
        self._value = None

    async def get(self) -> str:
        async with self._lock:
            if self._value and time.monotonic() < self._until:
                return self._value
            try:
                resp = await self._token.refresh(timeout=20)
            except aiohttp.ClientResponseError as e:
                if e.status in (400, 401, 403):
                    raise CredentialsError(
                        f"GCP refused the credentials in {self.creds.path} ({e.status}: "
                        f"{_short(e.message)})", hint=LOGIN_HINT) from None
                raise
            except (KeyError, ValueError) as e:  # a malformed key file or token answer
                raise CredentialsError(
                    f"GCP credentials {self.creds.path} are not usable: {type(e).__name__}: {e}",
                    hint=LOGIN_HINT) from None
            self._value = resp.value
            self._until = time.monotonic() + max(60.0, resp.expires_in * 0.9)
            return resp.value


def _short(text: str) -> str:
    return " ".join(str(text).split())[:300]


class ComputeAPI:
    """One project's Compute API (its own aiohttp session, made in the running loop)."""

    def __init__(self, creds: Credentials, project: str) -> None:
        self.creds = creds
        self.project = project
        self.base = compute_url()
        self._session: aiohttp.ClientSession | None = None
        self._tokens: TokenSource | None = None
        self._loop: object = None
        self.calls = 0

    def _ensure(self) -> tuple[aiohttp.ClientSession, TokenSource]:
        import asyncio

        loop = asyncio.get_running_loop()
        if self._session is None or self._tokens is None or self._loop is not loop:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S))
            self._tokens = TokenSource(self.creds, self._session)
            self._loop = loop
        return self._session, self._tokens

    async def token(self) -> str:
        return await self._ensure()[1].get()

    async def call(self, method: str, path: str, *, params: dict[str, str] | None = None,
                   body: dict[str, Any] | None = None) -> dict[str, Any]:
        """``method`` on ``projects/<project>/<path>`` (``path`` "" is the project itself)."""
        url = f"{self.base}/projects/{self.project}" + (f"/{path}" if path else "")
        return await self.call_url(method, url, params=params, body=body)

    async def call_url(self, method: str, url: str, *, params: dict[str, str] | None = None,
                       body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One authorised request to any Google API URL (e.g. OS Login's)."""
        session, tokens = self._ensure()
        for attempt in (1, 2):
            headers = {"Authorization": f"Bearer {await tokens.get()}"}
            self.calls += 1
            async with session.request(method, url, params=params, json=body, headers=headers) as r:
                try:
                    data = await r.json(content_type=None)
                except ValueError:
                    data = {"error": {"message": (await r.text())[:300]}}
            if r.status == 401 and attempt == 1:  # an expired token: fetch one more
                tokens.invalidate()
                continue
            if r.status >= 300:
                raise GCEError.from_body(r.status, data)
            return dict(data or {})
        raise AssertionError("unreachable")

    async def wait(self, op: dict[str, Any], *, poll_s: float = 0.5) -> dict[str, Any]:
        """Poll an operation until DONE; its error is raised as a GCEError."""
        scope = f"zones/{op['zone'].rsplit('/', 1)[-1]}" if op.get("zone") else (
            f"regions/{op['region'].rsplit('/', 1)[-1]}" if op.get("region") else "global")
        while op.get("status") != "DONE":
            op = await self.call("POST", f"{scope}/operations/{op['name']}/wait")
            if op.get("status") != "DONE":
                await anyio.sleep(poll_s)
        if op.get("error"):
            raise GCEError.from_body(int(op.get("httpErrorStatusCode") or 400), {"error": op["error"]})
        return op

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
