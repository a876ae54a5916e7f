"""HotAisleCloud: the ``hotaisle`` infra (catalog: skyd/clouds/data/hotaisle.csv)."""

from __future__ import annotations

from skyd.clouds.base import Cloud
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.hotaisle.provisioner import HotAisleProvisioner
from skyd.clouds.neocloud.check import api_check
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.offering import Offering


class HotAisleCloud(Cloud):
    name = "hotaisle"
    unsupported = frozenset({"spot", "ports", "disk_size", "image_id", "labels", "bucket_mounts"})
    check_ttl_s = 600.0

    def __init__(self) -> None:
        self._prov = HotAisleProvisioner()

    async def check(self) -> tuple[bool, str]:
        """A key and team are found (HOTAISLE_API_KEY, HOTAISLE_TEAM, config); ``GET /user/``
        and the team's available VMs answer."""
        async def probe() -> tuple[bool, str]:
            api = await self._prov.api()
            try:
                user = await api.user()
                await api.available()
            except APIError as e:
                if e.status == 404:
                    return False, f"Hot Aisle team {api.team!r} not found ({e}); check HOTAISLE_TEAM"
                raise
            who = (user.get("user") or {}).get("email") if isinstance(user.get("user"), dict) else None
            return True, f"API key from {api.where}, team {api.team} ({who or user.get('email') or 'user'})"

        return await api_check("Hot Aisle", probe)

    def provisioner(self) -> HotAisleProvisioner:
        return self._prov


async def _fetch() -> list[Offering]:
    from skyd.clouds.hotaisle.fetch import fetch

    return await fetch()


register_catalog_fetcher("hotaisle", _fetch)  # `skyd catalog refresh hotaisle`
