"""VultrCloud: the ``vultr`` infra (catalog: skyd/clouds/data/vultr.csv)."""

from __future__ import annotations

import math

from skyd.clouds.base import Cloud, GpuIds
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.neocloud.check import api_check
from skyd.clouds.offering import Offering
from skyd.clouds.vultr.provisioner import VultrProvisioner

#: this provider's GPU ids (read by skyd.clouds.gpunames), from
#: the GPU word of plan ids (``vbm-256c-2048gb-8-mi300x-gpu``) and ``gpu_type`` of GPU
#: VM plans (``AMD_MI300X``, ``NVIDIA_A100``; Vultr's ``GET /plans`` docs).
GPU_IDS: GpuIds = (
    ("MI300X", "AMD_MI300X", ("mi300x", "amd_mi300x")),
    ("MI325X", "AMD_MI325X", ("mi325x", "amd_mi325x")),
    ("MI355X", "AMD_MI355X", ("mi355x", "amd_mi355x")),
    ("H100", "NVIDIA_H100", ("h100", "nvidia_h100")),
    ("A100", "NVIDIA_A100", ("a100", "nvidia_a100")),
    ("L40S", "NVIDIA_L40S", ("l40s", "nvidia_l40s")),
    ("A16", "NVIDIA_A16", ("a16", "nvidia_a16")),
    ("A40", "NVIDIA_A40", ("a40", "nvidia_a40")),
)


class VultrCloud(Cloud):
    name = "vultr"
    egress_tiers = ((math.inf, 0.01),)
    inter_region_per_gb = None
    minimum_billing_minutes = 0.0
    gpu_ids = GPU_IDS
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
