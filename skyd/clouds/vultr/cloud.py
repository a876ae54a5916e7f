"""VultrCloud: the ``vultr`` infra (catalog: skyd/clouds/data/vultr.csv)."""

from __future__ import annotations

from skyd.clouds.base import Cloud
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.neocloud.check import api_check
from skyd.clouds.offering import Offering
from skyd.clouds.vultr.provisioner import VultrProvisioner


class VultrCloud(Cloud):
    name = "vultr"
    unsupported = frozenset({"spot", "ports", "disk_size", "labels", "bucket_mounts"})
    check_ttl_s = 600.0

    def __init__(self) -> None:
        self._prov = VultrProvisioner()

    async def check(self) -> tuple[bool, str]:
        """A key is found (VULTR_API_KEY, config) and ``GET /account`` answers with it."""
        async def probe() -> tuple[bool, str]:
            api = await self._prov.api()
            acct = await api.account()
            return True, f"API key from {api.where} ({acct.get('email') or acct.get('name') or 'account'})"

        return await api_check("Vultr", probe)

    def provisioner(self) -> VultrProvisioner:
        return self._prov


async def _fetch() -> list[Offering]:
    from skyd.clouds.vultr.fetch import fetch

    return await fetch()


register_catalog_fetcher("vultr", _fetch)  # `skyd catalog refresh vultr`
