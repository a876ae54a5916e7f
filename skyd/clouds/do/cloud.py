"""DOCloud (``do``) and AMDDevCloud (``amddevcloud``): one implementation, two base URLs
(catalogs: skyd/clouds/data/do.csv, amddevcloud.csv)."""

from __future__ import annotations

import math

from skyd.clouds.base import Cloud, GpuIds
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.do import catalog, config
from skyd.clouds.do.provisioner import DOProvisioner
from skyd.clouds.neocloud.check import api_check
from skyd.clouds.neocloud.http import APIError

#: this provider's GPU ids (read by skyd.clouds.gpunames), from
#: ``gpu_info.model`` of ``GET /v2/sizes`` (``amd_mi300x``, DO's docs); AMD Developer
#: Cloud is the same API.
GPU_IDS: GpuIds = (
    ("MI300X", "amd_mi300x", ("mi300x",)),
    ("MI325X", "amd_mi325x", ("mi325x",)),
    ("MI350X", "amd_mi350x", ("mi350x",)),
    ("MI355X", "amd_mi355x", ("mi355x",)),
    ("H100", "nvidia_h100", ("h100",)),
    ("H200", "nvidia_h200", ("h200",)),
    ("L40S", "nvidia_l40s", ("l40s",)),
    ("RTX4000-Ada", "nvidia_rtx_4000_ada", ("rtx4000",)),
    ("RTX6000-Ada", "nvidia_rtx_6000_ada", ("rtx6000",)),
)


class DOCloud(Cloud):
    name = "do"
    egress_tiers = ((math.inf, 0.01),)  # DigitalOcean
    inter_region_per_gb = None
    minimum_billing_minutes = 0.0
    gpu_ids = GPU_IDS
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
