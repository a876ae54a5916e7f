"""DOCloud (``do``) and AMDDevCloud (``amddevcloud``): one implementation, two base URLs
(catalogs: skyd/clouds/data/do.csv, amddevcloud.csv)."""

from __future__ import annotations

from skyd.clouds.base import Cloud
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.do import catalog, config
from skyd.clouds.do.provisioner import DOProvisioner
from skyd.clouds.neocloud.check import api_check
from skyd.clouds.neocloud.rest import APIError


class DOCloud(Cloud):
    name = "do"
    flavor = config.DO
    # no spot GPU droplets; the size fixes the disk; no bucket mounts
    unsupported = frozenset({"spot", "disk_size", "bucket_mounts"})
    check_ttl_s = 600.0

    def __init__(self) -> None:
        self._prov = DOProvisioner(self.flavor)

    async def check(self) -> tuple[bool, str]:
        """A token found (the variable or file is named) and ``GET /v2/account`` answers."""
        title = self.flavor.title

        async def probe() -> tuple[bool, str]:
            api = await self._prov.api()
            acct = await api.account()
            status = acct.get("status") or "active"
            if status != "active":
                return False, f"{title} account is {status}: {acct.get('status_message') or ''}"
            return True, f"token from {api.token.source} ({acct.get('email') or 'account'})"

        return await api_check(title, probe, api_errors=(APIError,))

    def provisioner(self) -> DOProvisioner:
        return self._prov


class AMDDevCloud(DOCloud):
    name = "amddevcloud"
    flavor = config.AMD


register_catalog_fetcher("do", catalog.fetch_do)
register_catalog_fetcher("amddevcloud", catalog.fetch_amddevcloud)
