"""Crusoe's REST API: HMAC-SHA256 request signing, the calls the provider makes, operations
polled to completion, and how refusals map onto failover scopes.

Signing (every request): ``X-Crusoe-Timestamp: <ISO 8601, seconds>`` and ``Authorization:
Bearer 1.0:<access key>:<signature>``, where the signature is the unpadded base64url
HMAC-SHA256, keyed with the base64url-decoded secret key, of
``"<api path incl. /v1alpha5>\\n<sorted k=v&... query>\\n<METHOD>\\n<timestamp>\\n"``.

| what the API says | what skyd does |
| --- | --- |
| 401 / 403 (bad key, bad signature, no access to the project) | CredentialsError |
| create refused or its operation FAILED with out of stock / capacity | scope ``region`` (a location: the catalog's region) |
| quota exceeded | scope ``cloud`` (quotas are per project) |
| an image that does not exist | scope ``stop`` |
| 429 | retried after ``Retry-After``; still refused: scope ``cloud`` |
| anything else | scope ``region`` |
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

import anyio

from skyd.clouds.crusoe.config import HINT, Keys, api_url
from skyd.clouds.neocloud.http import APIError, JSONClient
from skyd.errors import CredentialsError, ResourcesUnavailableError, SkydError

SIG_VERSION = "1.0"


def _b64url_decode(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def signature(secret: str, path: str, query: Mapping[str, str], method: str, timestamp: str) -> str:
    q = "&".join(f"{k}={v}" for k, v in sorted(query.items()))
    payload = f"{path}\n{q}\n{method.upper()}\n{timestamp}\n".encode()
    mac = hmac.new(_b64url_decode(secret), payload, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def timestamp() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


class OperationFailed(APIError):
    """A create/delete operation that ended FAILED (its code and message)."""


class CrusoeAPI:
    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        base = api_url()
        self._prefix = urlparse(base).path.rstrip("/")
        self.rest = JSONClient("crusoe", base, lambda: {"Content-Type": "application/json"},
                               sign=self._sign)
        self.project_id = keys.project_id

    def _sign(self, method: str, path: str, query: Mapping[str, str]) -> dict[str, str]:
        ts = timestamp()
        sig = signature(self.keys.secret_key, self._prefix + path, query, method, ts)
        return {"X-Crusoe-Timestamp": ts,
                "Authorization": f"Bearer {SIG_VERSION}:{self.keys.access_key}:{sig}"}

    async def call(self, method: str, path: str, *, params: dict[str, str] | None = None,
                   body: Any = None) -> Any:
        try:
            data = await self.rest.request(method, path, params=params, json=body)
            return data if data is not None else {}
        except APIError as e:
            if e.status in (401, 403):
                raise CredentialsError(f"Crusoe refused the keys from {self.keys.source} ({e})",
                                       hint=HINT) from None
            raise

    async def project(self) -> str:
        """The project id (looked up by name once when the settings give none)."""
        if self.project_id:
            return self.project_id
        items = (await self.call("GET", "/projects")).get("items") or []
        name = self.keys.project_name
        pick = [p for p in items if name and p.get("name") == name] or (items if len(items) == 1 else [])
        if not pick:
            raise CredentialsError(
                f"no Crusoe project chosen ({len(items)} in the account"
                + (f", none named {name!r})" if name else ")"),
                hint="set CRUSOE_PROJECT_ID, or default_project in ~/.crusoe/config")
        self.project_id = str(pick[0]["id"])
        return self.project_id

    async def vm(self, method: str, sub: str = "", **kw: Any) -> Any:
        return await self.call(method, f"/projects/{await self.project()}/compute/vms{sub}", **kw)

    async def instances(self) -> list[dict[str, Any]]:
        return list((await self.vm("GET", "/instances")).get("items") or [])

    async def types(self) -> list[dict[str, Any]]:
        return list((await self.vm("GET", "/types")).get("items") or [])

    async def capacities(self, vm_type: str | None = None) -> list[dict[str, Any]]:
        params = {"product_name": vm_type} if vm_type else None
        return list((await self.call("GET", "/capacities", params=params)).get("items") or [])

    async def quotas(self) -> list[dict[str, Any]]:
        return list((await self.call("GET", f"/projects/{await self.project()}/quotas")).get("quotas") or [])

    async def operations(self) -> list[dict[str, Any]]:
        return list((await self.vm("GET", "/instances/operations")).get("items") or [])

    async def wait(self, op: dict[str, Any], poll_s: float) -> dict[str, Any]:
        """Poll an instance operation until it leaves IN_PROGRESS; FAILED raises."""
        op = dict(op.get("operation") or op)
        while op.get("state") == "IN_PROGRESS":
            await anyio.sleep(poll_s)
            op = dict(await self.vm("GET", f"/instances/operations/{op['operation_id']}"))
        if op.get("state") != "SUCCEEDED":
            res = op.get("result") or {}
            raise OperationFailed("crusoe", 400, str(res.get("message") or res),
                                  code=str(res.get("code") or op.get("state") or ""))
        return op

    async def close(self) -> None:
        await self.rest.close()


def classify(e: APIError, *, where: str) -> SkydError:
    said = str(e)
    text = f"{e.code} {e.message}".lower()
    if "quota" in text:
        return ResourcesUnavailableError(f"{where}: the project's quota is used up", scope="cloud",
                                         provider_message=said,
                                         hint="ask Crusoe for a higher quota (console > Quotas)")
    if "image" in text and ("not found" in text or "invalid" in text):
        return ResourcesUnavailableError(f"{where}: the image does not exist", scope="stop",
                                         provider_message=said, field="resources.image_id")
    if e.status == 429:
        return ResourcesUnavailableError(f"{where}: the API keeps rate limiting us", scope="cloud",
                                         provider_message=said)
    if e.status >= 500:
        return ResourcesUnavailableError(f"{where}: the API failed", scope="cloud", provider_message=said)
    if "stock" in text or "capacity" in text:
        return ResourcesUnavailableError(f"{where}: no capacity for this VM type in the location",
                                         scope="region", provider_message=said)
    return ResourcesUnavailableError(f"{where}: the create was refused", scope="region", provider_message=said)
