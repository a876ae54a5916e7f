"""EC2 / STS errors -> what skyd does about them.

The failover scopes follow SkyPilot's FailoverCloudErrorHandlerV2 for AWS (credentials
block the cloud; everything else blocks the zone it happened in, or the region when the
limit is regional), made explicit per error code:

- ``zone``: no capacity or no such offering in this zone (InsufficientInstanceCapacity,
  InsufficientHostCapacity, SpotMaxPriceTooLow, Unsupported, InvalidParameterCombination
  "not supported in your requested Availability Zone", ...);
- ``region``: a per-region quota or limit (VcpuLimitExceeded, MaxSpotInstanceCountExceeded,
  InstanceLimitExceeded, a region not enabled for the account: OptInRequired);
- ``cloud``: the credentials (AuthFailure, ExpiredToken, ...): raised as CredentialsError;
- ``stop``: the request itself is wrong wherever it goes (an image id that does not exist,
  an image of the wrong architecture, a malformed parameter).
"""

from __future__ import annotations

from typing import Any

from skyd.errors import CredentialsError, FailoverScope, ResourcesUnavailableError

ZONE_CODES = frozenset({
    "InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientCapacity",
    "InsufficientReservedInstanceCapacity", "InsufficientFreeAddressesInSubnet",
    "SpotMaxPriceTooLow", "Unsupported", "InvalidParameterCombination",
    "InsufficientCapacityOnHost", "ReservationCapacityExceeded", "Server.InsufficientInstanceCapacity",
})
REGION_CODES = frozenset({
    "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "InstanceLimitExceeded",
    "MaxSpotFleetRequestCountExceeded", "ResourceLimitExceeded", "OptInRequired",
    "SecurityGroupLimitExceeded", "KeyPairLimitExceeded", "PlacementGroupLimitExceeded",
    "AddressLimitExceeded", "VPCIdNotSpecified",
})
CREDENTIAL_CODES = frozenset({
    "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch",
    "ExpiredToken", "ExpiredTokenException", "RequestExpired", "InvalidAccessKeyId",
    "UnrecognizedClientException", "AccessDenied", "AccessDeniedException",
    "InvalidToken", "MissingAuthenticationToken", "Blocked", "PendingVerification",
})
STOP_PREFIXES = ("InvalidAMIID", "InvalidParameterValue", "InvalidBlockDeviceMapping",
                 "InvalidParameter", "MissingParameter", "InvalidInstanceType")

QUOTA_HINT = ("ask for a higher quota in the Service Quotas console (EC2: 'Running On-Demand'"
              " / 'All Standard Spot Instance Requests' vCPUs for this family), or launch elsewhere")
CREDENTIALS_HINT = ("set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with"
                    " `aws configure` / `aws sso login --profile NAME`; then `skyd check aws`")

_HINTS = {
    "InsufficientInstanceCapacity": "another zone, region or instance type may have capacity; or --retry-until-up",
    "SpotMaxPriceTooLow": "the spot price here is above the maximum; use on-demand or another zone",
    "Unsupported": "this instance type is not offered in that zone; skyd tries the next one",
    "VcpuLimitExceeded": QUOTA_HINT,
    "MaxSpotInstanceCountExceeded": QUOTA_HINT,
    "InstanceLimitExceeded": QUOTA_HINT,
    "OptInRequired": "enable the region for the account (AWS console: Account > AWS Regions), or pin another region",
}


def code_and_message(exc: BaseException) -> tuple[str, str]:
    resp: Any = getattr(exc, "response", None)
    if isinstance(resp, dict):
        err = resp.get("Error") or {}
        return str(err.get("Code") or ""), str(err.get("Message") or "")
    return "", str(exc)


def scope_for(code: str) -> FailoverScope | None:
    """The failover scope of an EC2 error code; None for credential errors."""
    if code in CREDENTIAL_CODES:
        return None
    if code in ZONE_CODES:
        return "zone"
    if code in REGION_CODES:
        return "region"
    if code.startswith(STOP_PREFIXES):
        return "stop"
    return "zone"  # SkyPilot's default handler: block where it failed


def classify(exc: BaseException, where: str) -> Exception:
    """The skyd error for a botocore failure during provisioning at ``where``
    ("aws/us-east-1/us-east-1a")."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return CredentialsError(f"AWS: {exc}", hint=CREDENTIALS_HINT)
    if isinstance(exc, EndpointConnectionError):
        return ResourcesUnavailableError(f"{where}: cannot reach the EC2 API ({exc})", scope="region",
                                         provider_message=str(exc))
    if not isinstance(exc, ClientError):
        return ResourcesUnavailableError(f"{where}: {type(exc).__name__}: {exc}", scope="zone",
                                         provider_message=str(exc))
    code, msg = code_and_message(exc)
    said = f"{code}: {msg}"
    scope = scope_for(code)
    if scope is None:
        return CredentialsError(f"AWS refused the credentials ({said})", hint=CREDENTIALS_HINT)
    hint = _HINTS.get(code)
    if scope == "stop" and code.startswith("InvalidAMIID"):
        hint = "check resources.image_id: the image must exist in this region (aws ec2 describe-images)"
    text = msg or code
    if hint == QUOTA_HINT:  # the fix belongs in the line the final error lists per attempt
        text = f"quota exceeded ({code}): {hint}"
    return ResourcesUnavailableError(f"{where}: {text}", scope=scope, provider_message=said,
                                     hint=hint)


def is_code(exc: BaseException, *codes: str) -> bool:
    code, _ = code_and_message(exc)
    return any(code == c or code.startswith(c + ".") for c in codes)
