"""Provider API errors -> what the failover loop does with them.

| the API says | raised |
| --- | --- |
| 401, 403, or words of a refused key ("unauthorized", "invalid api key", ...) | `CredentialsError` (the cloud is blocked, its check marked failed) |
| words of no capacity ("no capacity", "out of stock", "not enough", "no longer any instances available", "sold out", "unavailable", "insufficient") | `zone` (`region` where the offer has no zone) |
| words of a quota or limit ("quota", "limit", "exceeded") | `region` |
| 429 still refused after the retries, 5xx, an outage | `cloud` |
| any other 4xx (a bad parameter, an image the provider lacks) | `stop` (no other candidate would be asked differently) |
"""

from __future__ import annotations

import re

from skyd.clouds.neocloud.http import APIError
from skyd.errors import CredentialsError, FailoverScope, ResourcesUnavailableError, SkydError

AUTH_WORDS = re.compile(r"unauthori[sz]ed|invalid (api )?(key|token)|authentication|"
                        r"not authenticated|forbidden|api key", re.I)
CAPACITY_WORDS = re.compile(
    r"no capacity|out of (stock|capacity)|not enough|no longer any instances|sold out|"
    r"unavailable|insufficient|no (gpus?|machines?|hosts?|instances?) (are )?available|"
    r"could not find any|no available", re.I)
QUOTA_WORDS = re.compile(r"quota|limit (reached|exceeded)|exceeds? (your|the) (account )?limit",
                         re.I)


def is_auth(e: APIError) -> bool:
    return e.status in (401, 403) or bool(AUTH_WORDS.search(e.message))


def is_capacity(e: APIError) -> bool:
    return bool(CAPACITY_WORDS.search(e.message))


def scope_of(e: APIError, *, has_zone: bool) -> tuple[FailoverScope, str]:
    """(scope, why) for a non-credentials refusal."""
    if is_capacity(e):
        return ("zone" if has_zone else "region"), "out of capacity"
    if QUOTA_WORDS.search(e.message):
        return "region", "an account quota or limit is reached"
    if e.status == 429:
        return "cloud", "the API is rate limiting us (Retry-After exhausted)"
    if e.status >= 500:
        return "cloud", "the provider's API failed"
    if e.status == 404:
        return ("zone" if has_zone else "region"), "the offer is not available here"
    return "stop", "the provider rejected the request"


def classify(e: APIError, *, where: str, has_zone: bool, cred_hint: str,
             capacity: bool | None = None) -> SkydError:
    """The error to raise for a failed create in ``where`` (``provider/region[/zone]``);
    ``capacity`` overrides the word match when the provider has a structured signal."""
    if is_auth(e) and not capacity:
        return CredentialsError(f"{e.provider} refused the API key in {where}: {e}", hint=cred_hint)
    if capacity:
        scope: FailoverScope = "zone" if has_zone else "region"
        why = "out of capacity"
    else:
        scope, why = scope_of(e, has_zone=has_zone)
    return ResourcesUnavailableError(f"{where}: {why}", scope=scope, provider_message=str(e))
