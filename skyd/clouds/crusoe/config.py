"""Where the ``crusoe`` provider finds its settings (as the ``crusoe`` CLI does).

- Keys: ``$CRUSOE_ACCESS_KEY_ID`` + ``$CRUSOE_SECRET_KEY``, else the ``[default]`` profile
  (``$CRUSOE_PROFILE`` picks another) of ``~/.crusoe/config`` (TOML: ``access_key_id``,
  ``secret_key``, ``default_project``). ``$SKYD_CRUSOE_CONFIG`` names another file.
- Project: ``$CRUSOE_PROJECT_ID``, the profile's ``project_id``, else the project whose name
  is the profile's ``default_project`` (or the account's only project).
- API: ``$SKYD_CRUSOE_API_URL`` (default ``https://api.crusoecloud.com/v1alpha5``); SSH:
  ``$SKYD_CRUSOE_SSH_PORT`` (default 22), ``$SKYD_CRUSOE_POLL_S``.

Functions here read small files: callers run them in a thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from skyd import settings as knobs

API_URL = "https://api.crusoecloud.com/v1alpha5"
HINT = ("set CRUSOE_ACCESS_KEY_ID and CRUSOE_SECRET_KEY (and CRUSOE_PROJECT_ID), or run "
        "`crusoe init` to write ~/.crusoe/config")


@dataclass(frozen=True)
class Keys:
    access_key: str
    secret_key: str = field(repr=False)  # secret: never logged
    source: str  # the variables or file they came from (shown to users)
    project_id: str | None = None
    project_name: str | None = None


def config_file() -> Path:
    named = knobs.CRUSOE_CONFIG.get()
    return named if named is not None else Path.home() / ".crusoe" / "config"


def find_keys() -> Keys | None:
    env_project = os.environ.get("CRUSOE_PROJECT_ID") or None
    ak, sk = os.environ.get("CRUSOE_ACCESS_KEY_ID", "").strip(), os.environ.get("CRUSOE_SECRET_KEY", "").strip()
    if ak and sk:
        return Keys(ak, sk, "$CRUSOE_ACCESS_KEY_ID/$CRUSOE_SECRET_KEY", env_project)
    p = config_file()
    if not p.exists():
        return None
    import tomllib

    try:
        doc = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    profile = os.environ.get("CRUSOE_PROFILE") or "default"
    sec = doc.get(profile)
    if not isinstance(sec, dict) or not sec.get("access_key_id") or not sec.get("secret_key"):
        return None
    return Keys(str(sec["access_key_id"]), str(sec["secret_key"]), f"{p} [{profile}]",
                env_project or (str(sec["project_id"]) if sec.get("project_id") else None),
                str(sec["default_project"]) if sec.get("default_project") else None)


def api_url() -> str:
    return (knobs.CRUSOE_API_URL.get() or API_URL).rstrip("/")


def ssh_port() -> int:
    return knobs.CRUSOE_SSH_PORT.get()


def poll_s() -> float:
    return knobs.CRUSOE_POLL_S.get()
