"""The DigitalOcean API v2 calls the ``do``/``amddevcloud`` providers make, and how its
refusals map onto failover scopes.

| what the API says | what skyd does |
| --- | --- |
| 401 ``unauthorized`` | CredentialsError (the token is wrong or revoked) |
| 403 ``forbidden`` | CredentialsError (a read-only token) |
| 422 on create, "droplet limit" | scope ``cloud`` (an account-wide limit) |
| 422 on create, an image that does not exist | scope ``stop`` |
| 422 on create, anything else (size not available / no capacity in the region) | scope ``region`` (droplets have no zones) |
| 429 | retried after ``Retry-After``; still refused: scope ``cloud`` |
| 5xx | scope ``cloud`` |
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from skyd.clouds.do.config import Flavor, Token, api_url
from skyd.clouds.neocloud.http import APIError, JSONClient
from skyd.clouds.neocloud.names import plain_name
from skyd.errors import CredentialsError, ResourcesUnavailableError, SkydError

CLUSTER_TAG_PREFIX = "skyd-cluster:"
_TAG_BAD = re.compile(r"[^a-zA-Z0-9_\-:]")


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def cluster_tag(tag: str) -> str:
    """The droplet tag that marks every droplet of a cluster (``[a-zA-Z0-9_:-]``, 255 max)."""
    v = _TAG_BAD.sub("_", tag)
    if v != tag or len(v) > 200:
        v = v[:200] + "_" + _hash(tag)
    return CLUSTER_TAG_PREFIX + v


droplet_name = plain_name  # ``<tag>-<rank>``


def label_tags(labels: tuple[tuple[str, str], ...]) -> list[str]:
    return [_TAG_BAD.sub("_", f"{k}:{v}")[:255] for k, v in labels]


def fingerprint(public_key: str) -> str:
    """The MD5 fingerprint DigitalOcean names an SSH key by (``aa:bb:...``)."""
    blob = base64.b64decode(public_key.split()[1])
    h = hashlib.md5(blob, usedforsecurity=False).hexdigest()
    return ":".join(h[i:i + 2] for i in range(0, len(h), 2))


class DOAPI:
    def __init__(self, flavor: Flavor, token: Token) -> None:
        self.flavor = flavor
        self.token = token
        auth = {"Authorization": f"Bearer {token.value}", "Content-Type": "application/json"}
        self.rest = JSONClient(flavor.name, api_url(flavor), lambda: auth)

    async def call(self, method: str, path: str, *, params: dict[str, str] | None = None,
                   body: Any = None) -> Any:
        try:
            data = await self.rest.request(method, "/v2" + path, params=params, json=body)
            return data if data is not None else {}
        except APIError as e:
            if e.status in (401, 403):
                raise self.refused(e) from None
            raise

    def refused(self, e: APIError) -> CredentialsError:
        what = "refused the token" if e.status == 401 else "token lacks the write scope"
        return CredentialsError(f"{self.flavor.title} {what} from {self.token.source} ({e})",
                                hint=self.flavor.hint)

    async def account(self) -> dict[str, Any]:
        return dict((await self.call("GET", "/account")).get("account") or {})

    async def ensure_key(self, public_key: str) -> str:
        """Register skyd's SSH key once; returns its fingerprint (what droplet create takes)."""
        fp = fingerprint(public_key)
        try:
            await self.call("GET", f"/account/keys/{fp}")
            return fp
        except APIError as e:
            if e.status != 404:
                raise
        try:
            await self.call("POST", "/account/keys", body={"name": f"skyd-{fp[-11:].replace(':', '')}",
                                                          "public_key": public_key.strip()})
        except APIError as e:
            if not (e.status == 422 and "already" in e.message.lower()):
                raise
        return fp

    async def droplets(self, tag: str) -> list[dict[str, Any]]:
        """Every droplet carrying the cluster's tag (all pages)."""
        out: list[dict[str, Any]] = []
        page = 1
        while True:
            data = await self.call("GET", "/droplets", params={"tag_name": cluster_tag(tag),
                                                               "per_page": "200", "page": str(page)})
            out.extend(data.get("droplets") or [])
            nxt = ((data.get("links") or {}).get("pages") or {}).get("next")
            if not nxt:
                return out
            page += 1

    async def sizes(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        page = 1
        while True:
            data = await self.call("GET", "/sizes", params={"per_page": "200", "page": str(page)})
            out.extend(data.get("sizes") or [])
            if not ((data.get("links") or {}).get("pages") or {}).get("next"):
                return out
            page += 1

    async def close(self) -> None:
        await self.rest.close()


def classify(e: APIError, *, where: str) -> SkydError:
    """The error to raise for a refused droplet create in ``where`` (``do/<region>``)."""
    msg = e.message.lower()
    said = str(e)
    if e.status == 422:
        if "droplet limit" in msg or "exceed" in msg and "limit" in msg:
            return ResourcesUnavailableError(f"{where}: the account's droplet limit is reached",
                                             scope="cloud", provider_message=said,
                                             hint="ask DigitalOcean support to raise the droplet limit")
        if "image" in msg and ("not found" in msg or "invalid" in msg or "does not exist" in msg):
            return ResourcesUnavailableError(f"{where}: the image does not exist", scope="stop",
                                             provider_message=said, field="resources.image_id",
                                             hint="use an image slug or id from `doctl compute image list`")
        return ResourcesUnavailableError(f"{where}: no capacity for this size in the region",
                                         scope="region", provider_message=said)
    if e.status == 429:
        return ResourcesUnavailableError(f"{where}: the API keeps rate limiting us", scope="cloud",
                                         provider_message=said)
    if e.status == 404:
        return ResourcesUnavailableError(f"{where}: the size or region is not offered", scope="region",
                                         provider_message=said)
    return ResourcesUnavailableError(f"{where}: the API failed", scope="cloud", provider_message=said)
