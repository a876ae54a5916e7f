"""Where the GCP provider's settings come from: credentials, project, endpoints.

- Credentials: ``$GOOGLE_APPLICATION_CREDENTIALS`` (a service-account or authorized-user
  JSON), else gcloud's application-default credentials
  (``$CLOUDSDK_CONFIG`` or ``~/.config/gcloud``, ``application_default_credentials.json``).
  Found nowhere: the provider is disabled (no metadata-server probe: that would be a network
  call from every ``skyd check`` off GCE).
- Project: ``$SKYD_GCP_PROJECT``, ``$GOOGLE_CLOUD_PROJECT``, ``$CLOUDSDK_CORE_PROJECT``, the
  credentials' ``project_id`` / ``quota_project_id``, ``gcp.project_id`` in skyd's
  config.yaml, then gcloud's active configuration (``[core] project``).
- Endpoints: ``$SKYD_GCP_COMPUTE_URL`` (default ``https://compute.googleapis.com/compute/v1``),
  ``$SKYD_GCP_OSLOGIN_URL`` (default ``https://oslogin.googleapis.com/v1``)
  and ``$SKYD_GCP_TOKEN_URL`` (replaces the credentials' ``token_uri``), for proxies and tests.
- SSH: ``gcp.ssh_user`` (default ``skyd``), ``$SKYD_GCP_SSH_PORT`` / ``gcp.ssh_port``
  (default 22), ``gcp.use_internal_ips`` (reach nodes on their internal address, e.g. over a
  VPN), ``gcp.network`` (default ``default``).

Every function here is synchronous and small (file reads): callers run them in a thread.
"""

from __future__ import annotations

import configparser
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyd import settings as knobs
from skyd.errors import CredentialsError

COMPUTE_URL = "https://compute.googleapis.com/compute/v1"
OSLOGIN_URL = "https://oslogin.googleapis.com/v1"
LOGIN_HINT = ("run `gcloud auth application-default login`, or point "
              "GOOGLE_APPLICATION_CREDENTIALS at a service-account key file")
SUPPORTED_TYPES = ("service_account", "authorized_user", "impersonated_service_account",
                   "external_account")


@dataclass(frozen=True)
class Credentials:
    path: str  # where they were read (shown to users; the contents never are)
    kind: str
    data: dict[str, Any] = field(repr=False)

    @property
    def who(self) -> str:
        return str(self.data.get("client_email") or self.kind)


def gcloud_dir() -> Path:
    env = os.environ.get("CLOUDSDK_CONFIG")
    return Path(env) if env else Path.home() / ".config" / "gcloud"


def find_credentials() -> Credentials | None:
    """The credentials gcloud-aio-auth would use, read and checked; None when there are none.
    A file that is named but missing or unreadable is the user's mistake: CredentialsError."""
    named = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    path = Path(named).expanduser() if named else gcloud_dir() / "application_default_credentials.json"
    if not path.exists():
        if named:
            raise CredentialsError(
                f"GOOGLE_APPLICATION_CREDENTIALS names {path}, which does not exist",
                hint="fix the path, or " + LOGIN_HINT)
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CredentialsError(f"GCP credentials {path} cannot be read: {e}", hint=LOGIN_HINT) from None
    kind = str(data.get("type") if isinstance(data, dict) else "")
    if kind not in SUPPORTED_TYPES:
        raise CredentialsError(f"GCP credentials {path}: unsupported type {kind!r}", hint=LOGIN_HINT)
    return Credentials(str(path), kind, data)


def settings() -> dict[str, Any]:
    """The ``gcp:`` section of skyd's config.yaml (empty when absent)."""
    from skyd.clouds.settings import section

    return section("gcp")


def project_id(creds: Credentials | None, conf: dict[str, Any]) -> str | None:
    if knobs.GCP_PROJECT.is_set():
        return knobs.GCP_PROJECT.get()
    for env in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        if os.environ.get(env):
            return os.environ[env]
    if creds is not None:
        for key in ("project_id", "quota_project_id"):
            if creds.data.get(key):
                return str(creds.data[key])
    if conf.get("project_id"):
        return str(conf["project_id"])
    active = gcloud_dir() / "active_config"
    name = active.read_text().strip() if active.exists() else "default"
    cfg = gcloud_dir() / "configurations" / f"config_{name}"
    if cfg.exists():
        cp = configparser.ConfigParser()
        try:
            cp.read(cfg)
            return cp.get("core", "project", fallback=None) or None
        except configparser.Error:
            return None
    return None


def compute_url() -> str:
    return (knobs.GCP_COMPUTE_URL.get() or COMPUTE_URL).rstrip("/")


def oslogin_url() -> str:
    return (knobs.GCP_OSLOGIN_URL.get() or OSLOGIN_URL).rstrip("/")


def token_url() -> str | None:
    return knobs.GCP_TOKEN_URL.get()


def ssh_port(conf: dict[str, Any]) -> int:
    return int(knobs.GCP_SSH_PORT.get() or conf.get("ssh_port") or 22)
