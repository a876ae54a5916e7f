"""Hot Aisle's REST API (``https://admin.hotaisle.app/api``, ``Authorization: Token <key>``).

Key: ``$HOTAISLE_API_KEY``, else ``hotaisle.api_key`` in skyd's config.yaml; team handle:
``$HOTAISLE_TEAM``, else ``hotaisle.team``. ``$SKYD_HOTAISLE_API_URL`` replaces the
endpoint (tests, proxies).
"""

from __future__ import annotations

from typing import Any

from skyd.clouds.neocloud import settings
from skyd.clouds.neocloud.http import APIError, JSONClient, base_url
from skyd.errors import CredentialsError

URL = "https://admin.hotaisle.app/api"
ENV = "HOTAISLE_API_KEY"
TEAM_ENV = "HOTAISLE_TEAM"
KEY_HINT = ("set HOTAISLE_API_KEY and HOTAISLE_TEAM (the team handle; admin.hotaisle.app > "
            "API keys), or hotaisle.api_key and hotaisle.team in skyd's config.yaml")


def find_key() -> tuple[str | None, str | None, str]:
    """(key, team, where) — blocking (a file read): call in a thread."""
    import os

    conf = settings.section("hotaisle")
    key, where = settings.find_key(ENV, conf)
    team = os.environ.get(TEAM_ENV) or (str(conf["team"]) if conf.get("team") else None)
    return key, team, where


class HotAisleAPI:
    def __init__(self, key: str, team: str, where: str) -> None:
        self.where = where
        self.team = team
        self._key = key
        self.http = JSONClient("Hot Aisle", base_url("SKYD_HOTAISLE_API_URL", URL),
                               lambda: {"Authorization": f"Token {self._key}"})

    async def call(self, method: str, path: str, body: Any = None,
                   params: dict[str, str] | None = None, *, auth_refusal: bool = True) -> Any:
        """One request; a 401/403 is a refused key (CredentialsError) unless ``auth_refusal``
        is False: the VM create documents 401 for the team's VM limit, and its caller reads it."""
        try:
            return await self.http.request(method, path, json=body, params=params)
        except APIError as e:
            if auth_refusal and e.status in (401, 403):
                raise CredentialsError(f"Hot Aisle refused the API key from {self.where} "
                                       f"(team {self.team!r}: {e})", hint=KEY_HINT) from None
            raise

    def vms(self, rest: str = "") -> str:
        return f"teams/{self.team}/virtual_machines/{rest}"

    async def user(self) -> dict[str, Any]:
        return dict(await self.call("GET", "user/") or {})

    async def available(self) -> list[dict[str, Any]]:
        return list(await self.call("GET", self.vms("available/")) or [])

    async def upload_key(self, public_key: str) -> None:
        try:
            await self.call("POST", "user/ssh_keys/", {"authorized_key": " ".join(public_key.split()[:2])})
        except APIError as e:
            if e.status != 409:  # already there
                raise

    async def close(self) -> None:
        await self.http.close()
