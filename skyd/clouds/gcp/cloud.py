"""GCPCloud: the ``gcp`` infra (catalog: skyd/clouds/data/gcp.csv)."""

from __future__ import annotations

import math

import aiohttp

from skyd.clouds.base import Cloud
from skyd.clouds.gcp import catalog, instances
from skyd.clouds.gcp.api import GCEError
from skyd.clouds.gcp.provisioner import GCPProvisioner
from skyd.errors import CredentialsError


class GCPCloud(Cloud):
    name = "gcp"
    egress_tiers = ((math.inf, 0.12),)
    inter_region_per_gb = 0.02
    minimum_billing_minutes = 0.0
    gpu_ids = instances.GPU_IDS
    catalog_split_rows = catalog.SPLIT_ROWS  # GPU-only catalog rows paired with host types
    unsupported = frozenset({"bucket_mounts"})
    config_keys = frozenset({"gcp.vpc_name", "gcp.use_internal_ips", "gcp.labels",
                             "gcp.project_id", "gcp.network", "gcp.ssh_user", "gcp.ssh_port"})
    check_ttl_s = 600.0

    def __init__(self) -> None:
        self._prov = GCPProvisioner()

    async def check(self) -> tuple[bool, str]:
        """Credentials found and a token fetched, and the project answers (projects.get)."""
        try:
            api = await self._prov.api()
            await api.call("GET", "")
        except CredentialsError as e:
            return False, e.message + (f" ({e.hint})" if e.hint else "")
        except GCEError as e:
            if e.status == 404:
                return False, f"project {api.project!r} does not exist ({e})"
            return False, f"project {api.project!r}: {e}"
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            return False, f"Compute API unreachable: {type(e).__name__}: {e}"
        return True, f"project {api.project} ({api.creds.who})"

    def provisioner(self) -> GCPProvisioner:
        return self._prov
