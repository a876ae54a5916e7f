"""CrusoeCloud: the ``crusoe`` infra (catalog: skyd/clouds/data/crusoe.csv)."""

from __future__ import annotations

from skyd.clouds.base import Cloud
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.crusoe import catalog
from skyd.clouds.crusoe.provisioner import CrusoeProvisioner
from skyd.clouds.neocloud.check import api_check
from skyd.clouds.neocloud.rest import APIError


class CrusoeCloud(Cloud):
    name = "crusoe"
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
