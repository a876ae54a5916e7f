"""Vultr's REST API v2 (``https://api.vultr.com/v2``, Bearer key).

Key: ``$VULTR_API_KEY``, else ``vultr.api_key`` in skyd's config.yaml.
``$SKYD_VULTR_API_URL`` replaces the endpoint (tests, proxies).
"""

from __future__ import annotations

from typing import Any

from skyd.clouds.neocloud import settings
from skyd.clouds.neocloud.http import APIError, JSONClient, base_url
from skyd.errors import CredentialsError

URL = "https://api.vultr.com/v2"
ENV = "VULTR_API_KEY"
KEY_HINT = ("set VULTR_API_KEY (my.vultr.com > Account > API; allow this machine's address "
            "in the key's access control), or vultr.api_key in skyd's config.yaml")


def find_key() -> tuple[str | None, str]:
    return settings.find_key(ENV, settings.section("vultr"))


class VultrAPI:
    def __init__(self, key: str, where: str) -> None:
        self.where = where
        self._key = key
        self.http = JSONClient("Vultr", base_url("SKYD_VULTR_API_URL", URL),
                               lambda: {"Authorization": f"Bearer {self._key}"})

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None,
                   params: dict[str, str] | None = None) -> Any:
        try:
            return await self.http.request(method, path, json=body, params=params)
        except APIError as e:
            if e.status == 401:
                raise CredentialsError(f"Vultr refused the API key from {self.where} ({e})",
                                       hint=KEY_HINT) from None
            raise

    async def account(self) -> dict[str, Any]:
        return dict((await self.call("GET", "account") or {}).get("account") or {})

    async def list_all(self, path: str, key: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = ""
        while True:
            params = {"per_page": "500"} | ({"cursor": cursor} if cursor else {})
            page = await self.call("GET", path, params=params) or {}
            out += list(page.get(key) or [])
            cursor = str(((page.get("meta") or {}).get("links") or {}).get("next") or "")
            if not cursor:
                return out

    async def ssh_key_id(self, public_key: str) -> str:
        """The id of skyd's key in the account, uploaded once."""
        line = " ".join(public_key.split()[:2])
        for k in await self.list_all("ssh-keys", "ssh_keys"):
            if " ".join(str(k.get("ssh_key") or "").split()[:2]) == line:
                return str(k["id"])
        made = await self.call("POST", "ssh-keys", {"name": "skyd", "ssh_key": line})
        return str(made["ssh_key"]["id"])

    async def close(self) -> None:
        await self.http.close()
