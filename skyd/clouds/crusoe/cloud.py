"""CrusoeCloud: the ``crusoe`` infra (catalog: skyd/clouds/data/crusoe.csv)."""

from __future__ import annotations

import math

from skyd.clouds.base import Cloud, GpuIds
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.crusoe import catalog
from skyd.clouds.crusoe.provisioner import CrusoeProvisioner
from skyd.clouds.neocloud.check import api_check
from skyd.clouds.neocloud.http import APIError

#: this provider's GPU ids (read by skyd.clouds.gpunames), from
#: ``gpu_type`` of ``GET /projects/{id}/compute/vms/types`` (gpuhunt
#: ``providers/crusoe.py`` ``GPU_TYPE_MAP``).
GPU_IDS: GpuIds = (
    ("MI300X", "MI300X-192GB", ()),
    ("MI355X", "MI355X_288GB", ("MI355X-288GB",)),
    ("A100", "A100-PCIe-40GB", ()),
    ("A100-80GB", "A100-PCIe-80GB", ()),
    ("A100-80GB-SXM", "A100-SXM-80GB", ()),
    ("H100-SXM", "H100-SXM-80GB", ()),
    ("H200-SXM", "H200-SXM-141GB", ()),
    ("B200", "B200-SXM-180GB", ()),
    ("GB200", "GB200-NVL-186GB", ()),
    ("L40S", "L40S-48GB", ()),
    ("A40", "A40-PCIe-48GB", ()),
)


class CrusoeCloud(Cloud):
    name = "crusoe"
    egress_tiers = ((math.inf, 0.0),)
    inter_region_per_gb = None
    minimum_billing_minutes = 0.0
    gpu_ids = GPU_IDS
    # spot: Crusoe's spot request form is not documented; the VM type fixes the disk
    unsupported = frozenset({"spot", "disk_size", "labels", "bucket_mounts"})
    check_ttl_s = 600.0

    def __init__(self) -> None:
        self._prov = CrusoeProvisioner()

    async def check(self) -> tuple[bool, str]:
        """Keys found (the variables or file named) and the project's VM types answer (a
        signed request: a wrong secret fails here)."""
        async def probe() -> tuple[bool, str]:
            api = await self._prov.api()
            await api.types()
            return True, f"keys from {api.keys.source} (project {api.project_id})"

        return await api_check("Crusoe", probe, api_errors=(APIError,))

    def provisioner(self) -> CrusoeProvisioner:
        return self._prov


register_catalog_fetcher("crusoe", catalog.fetch)
