"""Per-provider settings: the ``<provider>:`` section of skyd's config.yaml and API keys
from the environment or that section (read in a thread: file reads)."""

from __future__ import annotations

import os
from typing import Any

from skyd import paths


def section(provider: str) -> dict[str, Any]:
    """The ``<provider>:`` section of ``$SKYD_CONFIG_DIR/config.yaml`` (empty when absent)."""
    p = paths.config_dir() / "config.yaml"
    if not p.exists():
        return {}
    import yaml

    try:
        doc = yaml.safe_load(p.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    sec = doc.get(provider) if isinstance(doc, dict) else None
    return dict(sec) if isinstance(sec, dict) else {}


def find_key(env: str, conf: dict[str, Any], key: str = "api_key") -> tuple[str | None, str]:
    """(the key, where it came from: the variable or the config file's field)."""
    if os.environ.get(env):
        return os.environ[env].strip(), f"${env}"
    if conf.get(key):
        return str(conf[key]).strip(), f"{paths.config_dir() / 'config.yaml'} ({key})"
    return None, ""
