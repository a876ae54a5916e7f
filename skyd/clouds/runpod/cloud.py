"""RunPodCloud: the ``runpod`` infra (catalog: skyd/clouds/data/runpod.csv)."""

from __future__ import annotations

import math

from skyd.clouds.base import Cloud, GpuIds
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.neocloud.check import api_check
from skyd.clouds.offering import Offering
from skyd.clouds.runpod.api import KEY_HINT
from skyd.clouds.runpod.provisioner import RunPodProvisioner

#: this provider's GPU ids (read by skyd.clouds.gpunames), from
#: ``gpuTypeId`` values: SkyPilot ``sky/provision/runpod/utils.py`` ``GPU_NAME_MAP``
#: (and the AMD ids of RunPod's ``gpuTypes`` answer: ``AMD Instinct MI300X OAM``).
GPU_IDS: GpuIds = (
    ("MI300X", "AMD Instinct MI300X OAM", ()),
    ("MI325X", "AMD Instinct MI325X OAM", ()),
    ("MI355X", "AMD Instinct MI355X OAM", ()),
    ("A100-80GB", "NVIDIA A100 80GB PCIe", ()),
    ("A100-80GB-SXM", "NVIDIA A100-SXM4-80GB", ()),
    ("A30", "NVIDIA A30", ()),
    ("A40", "NVIDIA A40", ()),
    ("B200", "NVIDIA B200", ()),
    ("H100", "NVIDIA H100 PCIe", ()),
    ("H100-SXM", "NVIDIA H100 80GB HBM3", ()),
    ("H100-NVL", "NVIDIA H100 NVL", ()),
    ("H200-SXM", "NVIDIA H200", ()),
    ("L4", "NVIDIA L4", ()),
    ("L40", "NVIDIA L40", ()),
    ("L40S", "NVIDIA L40S", ()),
    ("RTX3070", "NVIDIA GeForce RTX 3070", ()),
    ("RTX3080", "NVIDIA GeForce RTX 3080", ()),
    ("RTX3080Ti", "NVIDIA GeForce RTX 3080 Ti", ()),
    ("RTX3090", "NVIDIA GeForce RTX 3090", ()),
    ("RTX3090Ti", "NVIDIA GeForce RTX 3090 Ti", ()),
    ("RTX4070Ti", "NVIDIA GeForce RTX 4070 Ti", ()),
    ("RTX4080", "NVIDIA GeForce RTX 4080", ()),
    ("RTX4080Super", "NVIDIA GeForce RTX 4080 SUPER", ()),
    ("RTX4090", "NVIDIA GeForce RTX 4090", ()),
    ("RTX5090", "NVIDIA GeForce RTX 5090", ()),
    ("RTX2000-Ada", "NVIDIA RTX 2000 Ada Generation", ()),
    ("RTX4000-Ada", "NVIDIA RTX 4000 Ada Generation", ()),
    ("RTX5000-Ada", "NVIDIA RTX 5000 Ada Generation", ()),
    ("RTX6000-Ada", "NVIDIA RTX 6000 Ada Generation", ()),
    ("RTXA2000", "NVIDIA RTX A2000", ()),
    ("RTXA4000", "NVIDIA RTX A4000", ()),
    ("RTXA4500", "NVIDIA RTX A4500", ()),
    ("RTXA5000", "NVIDIA RTX A5000", ()),
    ("RTXA6000", "NVIDIA RTX A6000", ()),
    ("RTXPRO6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", ()),
)


class RunPodCloud(Cloud):
    name = "runpod"
    egress_tiers = ((math.inf, 0.0),)  # no egress fees
    inter_region_per_gb = None
    minimum_billing_minutes = 0.0
    gpu_ids = GPU_IDS
    unsupported = frozenset({"labels", "bucket_mounts"})
    native_containers = True  # docker:<img> is the pod's image
    check_ttl_s = 600.0

    def __init__(self) -> None:
        self._prov = RunPodProvisioner()

    async def check(self) -> tuple[bool, str]:
        """A key is found (RUNPOD_API_KEY, config) and ``myself`` answers with it."""
        async def probe() -> tuple[bool, str]:
            api = await self._prov.api()
            me = await api.myself()
            return True, f"API key from {api.where} ({me.get('email') or me.get('id') or 'account'})"

        return await api_check("RunPod", probe, refused=lambda e: (
            f"RunPod refused the API key ({e}); {KEY_HINT}" if e.status == 401 else None))

    def provisioner(self) -> RunPodProvisioner:
        return self._prov


async def _fetch() -> list[Offering]:
    from skyd.clouds.runpod.fetch import fetch

    return await fetch()


register_catalog_fetcher("runpod", _fetch)  # `skyd catalog refresh runpod`
