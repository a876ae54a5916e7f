"""The ``<provider>:`` section of the active config (skyd.config): SkyPilot's layered
config with skyd's own ``$SKYD_CONFIG_DIR/config.yaml`` on top, validated (a bad file or key
is an error, never an empty section). Reads files: async callers run it in a thread."""

from __future__ import annotations

from typing import Any


def section(provider: str) -> dict[str, Any]:
    """The ``<provider>:`` section of the request's config (empty when absent)."""
    from skyd import config

    return config.section(provider)
