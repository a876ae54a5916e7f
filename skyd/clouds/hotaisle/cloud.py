"""HotAisleCloud: the ``hotaisle`` infra (catalog: skyd/clouds/data/hotaisle.csv)."""

from __future__ import annotations

import aiohttp

from skyd.clouds.base import Cloud
from skyd.clouds.catalog_refresh import register_catalog_fetcher
from skyd.clouds.hotaisle.provisioner import HotAisleProvisioner
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.offering import Offering
from skyd.errors import CredentialsError


class HotAisleCloud(Cloud):
    name = "hotaisle"
    unsupported = frozenset({"spot", "ports", "disk_size", "image_id", "labels", "bucket_mounts"})
    check_ttl_s = 600.0

    def __init__(self) -> None:
        self._prov = HotAisleProvisioner()

    async def check(self) -> tuple[bool, str]:
        """A key and team are found (HOTAISLE_API_KEY, HOTAISLE_TEAM, config); ``GET /user/``
        and the team's available VMs answer."""
        try:
            api = await self._prov.api()
            user = await api.user()
            await api.available()
        except CredentialsError as e:
            return False, e.message + (f" ({e.hint})" if e.hint else "")
        except APIError as e:
            if e.status == 404:
                return False, f"Hot Aisle team {api.team!r} not found ({e}); check HOTAISLE_TEAM"
            return False, f"Hot Aisle API: {e}"
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            return False, f"Hot Aisle API unreachable: {type(e).__name__}: {e}"
        return True, f"API key from {api.where}, team {api.team} ({user.get('email') or 'user'})"

    def provisioner(self) -> HotAisleProvisioner:
        return self._prov


async def _fetch() -> list[Offering]:
    from skyd.clouds.hotaisle.fetch import fetch

    return await fetch()


register_catalog_fetcher("hotaisle", _fetch)  # `skyd catalog refresh hotaisle`
