"""The ``aws`` Cloud: credential check (sts get_caller_identity), location validation,
the provisioner, and the catalog fetcher for ``skyd catalog refresh aws``."""

from __future__ import annotations

import difflib
import functools
import math

from skyd.clouds.aws.provisioner import AWSProvisioner
from skyd.clouds.base import Cloud
from skyd.clouds.offering import Offering
from skyd.errors import InvalidSpecError

INSTALL_HINT = "pip install aiobotocore (a dependency of skyd; this install lacks it)"


@functools.lru_cache(maxsize=1)
def known_regions() -> frozenset[str]:
    """Every EC2 region botocore knows (all partitions) plus the catalog's."""
    out: set[str] = set()
    try:
        import botocore.session

        from skyd.clouds.aws.session import with_shared_loader

        s = with_shared_loader(botocore.session.get_session())
        for part in s.get_available_partitions():
            out.update(s.get_available_regions("ec2", partition_name=part))
    except ImportError:
        pass
    try:
        from skyd.clouds.catalog import load_catalog

        out.update(o.region for o in load_catalog().by_cloud("aws"))
    except Exception:  # noqa: BLE001, S110 - the catalog is a second source only
        pass
    return frozenset(out)


class AWSCloud(Cloud):
    name = "aws"
    # internet egress: $0.09 / $0.085 / $0.07 / $0.05 per GB over 10 / 40 / 100 TB steps (SkyPilot)
    egress_tiers = ((10 * 1024, 0.09), (50 * 1024, 0.085), (150 * 1024, 0.07), (math.inf, 0.05))
    inter_region_per_gb = 0.02
    minimum_billing_minutes = 0.0
    gpu_ids = ()
    unsupported = frozenset({"bucket_mounts"})
    config_keys = frozenset({
        "aws.vpc_name", "aws.use_internal_ips", "aws.labels", "aws.security_group_name",
        "aws.ssh_user", "aws.remote_identity", "aws.placement_group"})
    provision_timeout_s = 1200.0
    check_ttl_s = 600.0

    def __init__(self) -> None:
        from skyd.clouds.catalog_refresh import register_catalog_fetcher

        self._prov = AWSProvisioner()
        register_catalog_fetcher("aws", self._fetch_catalog)

    async def _fetch_catalog(self) -> str | list[Offering]:
        from skyd.clouds.aws.pricing import fetch_catalog

        return await fetch_catalog(self._prov.clients)

    def provisioner(self) -> AWSProvisioner:
        return self._prov

    def validate_location(self, region: str | None, zone: str | None) -> None:
        regions = known_regions()
        if region and regions and region not in regions:
            near = difflib.get_close_matches(region, sorted(regions), n=3)
            raise InvalidSpecError(
                f"AWS has no region {region!r}", field="resources.infra",
                hint=(f"did you mean {', '.join(near)}?" if near else "see `aws ec2 describe-regions`"))
        if zone and region and not (zone.startswith(region) or "-az" in zone):
            raise InvalidSpecError(
                f"zone {zone!r} is not in AWS region {region!r}", field="resources.infra",
                hint=f"zones of {region} look like {region}a (or the zone id, e.g. use1-az1)")

    async def check(self) -> tuple[bool, str]:
        try:
            import aiobotocore  # noqa: F401
        except ImportError:
            return False, f"aiobotocore is not installed: {INSTALL_HINT}"
        from skyd.clouds.aws.errors import CREDENTIALS_HINT, code_and_message
        from skyd.clouds.aws.session import guard_endpoint
        from skyd.errors import SkydError

        try:
            guard_endpoint("sts")
        except SkydError as e:
            return False, str(e)
        clients = self._prov.clients
        try:
            creds = await clients.credentials()
        except Exception as e:  # noqa: BLE001 - a broken profile/SSO cache is a disabled cloud
            return False, f"AWS credentials could not be loaded: {e}; {CREDENTIALS_HINT}"
        if creds is None:
            return False, f"no AWS credentials found; {CREDENTIALS_HINT}"
        region = clients.session().get_config_variable("region") or "us-east-1"
        try:
            sts = await clients.client("sts", region)
            who = await sts.get_caller_identity()
        except Exception as e:  # noqa: BLE001 - refused/expired/unreachable: disabled
            code, msg = code_and_message(e)
            said = f"{code}: {msg}" if code else str(e)
            return False, f"AWS refused the credentials ({said}); {CREDENTIALS_HINT}"
        method = getattr(creds, "method", "") or "credentials"
        return True, f"account {who.get('Account')} ({who.get('Arn')}, {method})"

__all__ = ["AWSCloud", "AWSProvisioner"]
