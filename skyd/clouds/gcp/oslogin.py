"""Projects with OS Login: GCE ignores ``ssh-keys`` metadata there, so skyd's key goes to the
account's OS Login profile and SSH uses the profile's POSIX user (as SkyPilot does with
``gcloud compute os-login ssh-keys add`` and ``describe-profile``).

OS Login is on when the project's ``commonInstanceMetadata`` has ``enable-oslogin`` true
(the Compute API's projects.get). The key is imported with the OS Login API's
``users.importSshPublicKey`` (``POST https://oslogin.googleapis.com/v1/users/<email>:importSshPublicKey``,
body ``{"key": "<openssh public key>"}``, query ``projectId``), which answers the login
profile; the POSIX account of this project (else the primary one) names the SSH user. The
account is the credentials' ``client_email`` (service accounts) or ``gcp.oslogin_account`` in
config.yaml (user credentials carry no email). Importing the same key again is a no-op.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from skyd.clouds.gcp.api import ComputeAPI
from skyd.clouds.gcp.config import oslogin_url
from skyd.errors import CredentialsError

TRUE = ("true", "1", "yes", "y", "on")


def enabled(project: dict[str, Any]) -> bool:
    items = ((project.get("commonInstanceMetadata") or {}).get("items")) or []
    return any(str(i.get("key")) == "enable-oslogin" and str(i.get("value", "")).strip().lower() in TRUE
               for i in items)


def account(api: ComputeAPI, conf: dict[str, Any]) -> str:
    email = str(api.creds.data.get("client_email") or conf.get("oslogin_account") or "")
    if not email:
        raise CredentialsError(
            f"project {api.project!r} has OS Login enabled (metadata keys are ignored) and the "
            f"credentials in {api.creds.path} name no account",
            hint="set gcp.oslogin_account (your Google account's email) in skyd's config.yaml, "
                 "or use a service-account key")
    return email


async def import_key(api: ComputeAPI, conf: dict[str, Any], public_key: str) -> str:
    """Add ``public_key`` to the account's OS Login profile; returns the POSIX user name."""
    email = account(api, conf)
    url = f"{oslogin_url()}/users/{quote(email, safe='@')}:importSshPublicKey"
    resp = await api.call_url("POST", url, params={"projectId": api.project},
                              body={"key": public_key.strip()})
    accounts = [a for a in (resp.get("loginProfile") or {}).get("posixAccounts") or [] if a.get("username")]
    if not accounts:
        raise CredentialsError(f"OS Login gave {email} no POSIX account in project {api.project!r}",
                               hint="grant the account roles/compute.osAdminLogin on the project")
    mine = [a for a in accounts if a.get("accountId") == api.project] or \
        [a for a in accounts if a.get("primary")] or accounts
    return str(mine[0]["username"])
