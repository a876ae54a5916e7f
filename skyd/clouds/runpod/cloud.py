"""RunPodCloud: the ``runpod`` infra (catalog: skyd/clouds/data/runpod.csv)."""

from __future__ import annotations

from skyd.clouds.base import Cloud
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.neocloud.check import api_check
from skyd.clouds.offering import Offering
from skyd.clouds.runpod.api import KEY_HINT
from skyd.clouds.runpod.provisioner import RunPodProvisioner


class RunPodCloud(Cloud):
    name = "runpod"
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
