"""RunPodCloud: the ``runpod`` infra (catalog: skyd/clouds/data/runpod.csv)."""

from __future__ import annotations

import aiohttp

from skyd.clouds.base import Cloud
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.offering import Offering
from skyd.clouds.runpod.api import KEY_HINT
from skyd.clouds.runpod.provisioner import RunPodProvisioner
from skyd.errors import CredentialsError


class RunPodCloud(Cloud):
    name = "runpod"
    unsupported = frozenset({"labels", "bucket_mounts"})
    check_ttl_s = 600.0

    def __init__(self) -> None:
        self._prov = RunPodProvisioner()

    async def check(self) -> tuple[bool, str]:
        """A key is found (RUNPOD_API_KEY, config) and ``myself`` answers with it."""
        try:
            api = await self._prov.api()
            me = await api.myself()
        except CredentialsError as e:
            return False, e.message + (f" ({e.hint})" if e.hint else "")
        except APIError as e:
            if e.status == 401:
                return False, f"RunPod refused the API key ({e}); {KEY_HINT}"
            return False, f"RunPod API: {e}"
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            return False, f"RunPod API unreachable: {type(e).__name__}: {e}"
        return True, f"API key from {api.where} ({me.get('email') or me.get('id') or 'account'})"

    def provisioner(self) -> RunPodProvisioner:
        return self._prov


async def _fetch() -> list[Offering]:
    from skyd.clouds.runpod.fetch import fetch

    return await fetch()


register_catalog_fetcher("runpod", _fetch)  # `skyd catalog refresh runpod`
