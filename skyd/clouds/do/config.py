"""Where the ``do`` and ``amddevcloud`` providers find their settings.

| | ``do`` (DigitalOcean) | ``amddevcloud`` (AMD Developer Cloud) |
| --- | --- | --- |
| token | ``$DIGITALOCEAN_TOKEN``, ``$DIGITALOCEAN_ACCESS_TOKEN`` (doctl's), then doctl's ``access-token`` (or its current ``context`` in ``auth-contexts``) in ``$XDG_CONFIG_HOME/doctl/config.yaml`` (``~/.config/doctl/config.yaml``) | ``$AMD_DEVELOPER_CLOUD_TOKEN`` (``$AMDDEVCLOUD_TOKEN`` too) |
| API | ``$SKYD_DO_API_URL`` or ``https://api.digitalocean.com`` | ``$SKYD_AMDDEVCLOUD_API_URL`` or ``https://api.devcloud.amd.com`` |

Both: ``$SKYD_DO_SSH_PORT`` (default 22, for proxies and tests), ``$SKYD_DO_POLL_S``.
Functions here read small files: callers run them in a thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from skyd import settings as knobs


@dataclass(frozen=True)
class Flavor:
    name: str  # the infra name
    title: str
    default_url: str
    url_env: str
    token_envs: tuple[str, ...]
    doctl: bool  # read doctl's config file too
    hint: str


DO = Flavor("do", "DigitalOcean", "https://api.digitalocean.com", "SKYD_DO_API_URL",
            ("DIGITALOCEAN_TOKEN", "DIGITALOCEAN_ACCESS_TOKEN"), True,
            "set DIGITALOCEAN_TOKEN to a personal access token with write scope, or run "
            "`doctl auth init` (~/.config/doctl/config.yaml)")
AMD = Flavor("amddevcloud", "AMD Developer Cloud", "https://api.devcloud.amd.com",
             "SKYD_AMDDEVCLOUD_API_URL", ("AMD_DEVELOPER_CLOUD_TOKEN", "AMDDEVCLOUD_TOKEN"), False,
             "set AMD_DEVELOPER_CLOUD_TOKEN to an API token from the AMD Developer Cloud console")


@dataclass(frozen=True)
class Token:
    value: str  # secret: never logged
    source: str  # the variable or file it came from (shown to users)


def doctl_config() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "doctl" / "config.yaml"


def find_token(flavor: Flavor) -> Token | None:
    for env in flavor.token_envs:
        v = os.environ.get(env, "").strip()
        if v:
            return Token(v, f"${env}")
    if not flavor.doctl:
        return None
    p = doctl_config()
    if not p.exists():
        return None
    import yaml

    try:
        doc = yaml.safe_load(p.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict):
        return None
    ctx = str(doc.get("context") or "default")
    tok = doc.get("access-token") if ctx == "default" else (doc.get("auth-contexts") or {}).get(ctx)
    return Token(str(tok).strip(), f"{p} (context {ctx})") if tok else None


def api_url(flavor: Flavor) -> str:
    return (str(knobs.knob(flavor.url_env).get() or "") or flavor.default_url).rstrip("/")


def ssh_port() -> int:
    return knobs.DO_SSH_PORT.get()


def poll_s() -> float:
    return knobs.DO_POLL_S.get()
