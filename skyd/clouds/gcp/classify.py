"""GCE errors -> failover scopes, as SkyPilot's ``FailoverCloudErrorHandlerV2._gcp_handler``.

| what GCE says | scope |
| --- | --- |
| ``ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS]``, ``UNSUPPORTED_OPERATION`` (seen when a VM is preempted while it is made), ``RESOURCE_NOT_READY``, ``RESOURCE_NOT_FOUND``, "... was not found" (an accelerator or machine type this zone lacks), "is not found or access is unauthorized" (a zone the project cannot use), anything unrecognised | zone |
| ``QUOTA_EXCEEDED`` for ``GPUS_ALL_REGIONS`` (a global quota) | cloud |
| any other ``QUOTA_EXCEEDED`` / ``quotaExceeded`` (a regional quota: CPUS, NVIDIA_T4_GPUS, ...) | region |
| ``VPC_NOT_FOUND`` (networks are global), "Requested disk size cannot be smaller than the image size" | cloud |
| ``SUBNET_NOT_FOUND_FOR_VPC`` | region |
| the image does not exist | stop (no other zone can help) |
| any other 400 ``invalid`` / ``badRequest`` ("Invalid value for field ...": a body the API refuses, e.g. a spot VM with ``onHostMaintenance: MIGRATE``) | stop: every zone would refuse it the same way |
| HTTP 401, ``IAM_PERMISSION_DENIED``, 403 ``forbidden`` / "Required '...' permission", "Policy update access denied." | CredentialsError (the cloud is blocked, its check marked failed) |
"""

from __future__ import annotations

from skyd.clouds.gcp.api import GCEError
from skyd.clouds.gcp.config import LOGIN_HINT
from skyd.errors import CredentialsError, FailoverScope, ResourcesUnavailableError, SkydError

ZONE_CODES = frozenset({"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                        "UNSUPPORTED_OPERATION", "RESOURCE_NOT_READY", "RESOURCE_NOT_FOUND",
                        "resourceNotReady", "resourceNotFound", "notFound"})
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "quotaExceeded", "rateLimitExceeded"})
INVALID_CODES = frozenset({"invalid", "badRequest", "INVALID_ARGUMENT", "invalidParameter",
                           "INVALID_FIELD_VALUE", "required"})
PERMISSION_CODES = frozenset({"IAM_PERMISSION_DENIED", "forbidden", "PERMISSION_DENIED",
                              "insufficientPermissions", "UNAUTHENTICATED", "authError"})


def _one(code: str, msg: str, status: int) -> tuple[FailoverScope | None, str]:
    """(scope, why) for one error entry; scope None: a credentials problem."""
    if status == 401 or code in PERMISSION_CODES or "Policy update access denied." in msg \
            or ("Required '" in msg and "permission" in msg):
        return None, "the credentials lack a permission"
    if code in QUOTA_CODES:
        if "GPUS_ALL_REGIONS" in msg:
            return "cloud", "the project's global GPU quota (GPUS_ALL_REGIONS) is used up"
        return "region", "a regional quota is exceeded"
    if "/images/" in msg and "not found" in msg.lower() or code == "IMAGE_NOT_FOUND":
        return "stop", "the image does not exist"
    if code == "VPC_NOT_FOUND":
        return "cloud", "the VPC network does not exist (networks are global)"
    if "Requested disk size cannot be smaller than the image size" in msg:
        return "cloud", "the disk is smaller than the image"
    if code == "SUBNET_NOT_FOUND_FOR_VPC":
        return "region", "the network has no subnet in this region"
    if "does not exist in zone" in msg:
        return "zone", "the machine type is not offered in this zone"
    if code.startswith("ZONE_RESOURCE_POOL_EXHAUSTED"):
        return "zone", "the zone is out of capacity for this machine"
    if code in ZONE_CODES or "was not found" in msg or "is not found or access is unauthorized" in msg:
        return "zone", "the zone cannot serve this request"
    if code in INVALID_CODES or msg.startswith("Invalid value for field"):
        return "stop", "the Compute API refused the request as invalid"
    return "zone", "unrecognised error"


_RANK: dict[FailoverScope, int] = {"zone": 0, "region": 1, "cloud": 2, "stop": 3}


def classify(e: GCEError, *, where: str, field: str | None = None) -> SkydError:
    """The error to raise for a failed create/start in ``where`` (``gcp/<region>/<zone>``):
    CredentialsError, or ResourcesUnavailableError with the widest scope any entry implies
    and the API's own codes and messages as ``provider_message``."""
    said = str(e)
    scope: FailoverScope = "zone"
    why = "unrecognised error"
    for code, msg in e.errors or [(f"HTTP_{e.status}", "")]:
        s, w = _one(code, msg, e.status)
        if s is None:
            return CredentialsError(
                f"GCP refused the request in {where}: {_short(msg or said)}",
                hint="grant the account the Compute Admin role (roles/compute.admin) and "
                "Service Account User, or " + LOGIN_HINT)
        if _RANK[s] > _RANK[scope] or why == "unrecognised error":
            scope, why = s, w
    hint = None
    if scope == "region" and why.startswith("a regional quota"):
        hint = "request more quota (IAM & Admin > Quotas) or let skyd try another region"
    elif scope == "cloud" and "GPUS_ALL_REGIONS" in why:
        hint = "request a higher GPUS_ALL_REGIONS quota (IAM & Admin > Quotas)"
    elif why.startswith("the machine type is not"):
        hint = "pick another zone or instance type (skyd show-gpus, the gcp catalog)"
    elif scope == "stop" and why.startswith("the image"):
        hint = "check resources.image_id (gcloud compute images list)"
        field = field or "resources.image_id"
    return ResourcesUnavailableError(f"{where}: {why}", scope=scope, provider_message=_short(said),
                                     hint=hint, field=field)


def _short(text: str) -> str:
    return " ".join(text.split())[:500]
