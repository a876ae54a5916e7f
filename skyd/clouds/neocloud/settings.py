"""Per-provider settings: the ``<provider>:`` section of skyd's config.yaml and API keys
from the environment or that section (read in a thread: file reads)."""

from __future__ import annotations

import os
from typing import Any

from skyd import paths
from skyd.clouds.settings import section

__all__ = ["find_key", "section"]


def find_key(env: str, conf: dict[str, Any], key: str = "api_key") -> tuple[str | None, str]:
    """(the key, where it came from: the variable or the config file's field)."""
    if os.environ.get(env):
        return os.environ[env].strip(), f"${env}"
    if conf.get(key):
        return str(conf[key]).strip(), f"{paths.config_dir() / 'config.yaml'} ({key})"
    return None, ""
