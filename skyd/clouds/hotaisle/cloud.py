"""HotAisleCloud: the ``hotaisle`` infra (catalog: skyd/clouds/data/hotaisle.csv)."""

from __future__ import annotations

import math

from skyd.clouds.base import Cloud, GpuIds
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.hotaisle.provisioner import HotAisleProvisioner
from skyd.clouds.neocloud.check import api_check
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.offering import Offering

#: this provider's GPU ids (read by skyd.clouds.gpunames), from
#: ``Specs.gpus[].model`` of ``GET /teams/{team}/virtual_machines/available``.
GPU_IDS: GpuIds = (
    ("MI300X", "MI300X", ()),
    ("MI325X", "MI325X", ()),
    ("MI355X", "MI355X", ()),
)


class HotAisleCloud(Cloud):
    name = "hotaisle"
    egress_tiers = ((math.inf, 0.0),)
    inter_region_per_gb = None
    minimum_billing_minutes = 60.0  # MinimumReservationMinutes of its offers (60 for its MI300X VMs)
    gpu_ids = GPU_IDS
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
