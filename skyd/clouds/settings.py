"""The ``<provider>:`` section of skyd's config.yaml (``$SKYD_CONFIG_DIR/config.yaml``),
shared by every provider. Reads a small file: async callers run it in a thread."""

from __future__ import annotations

from typing import Any

from skyd import paths


def section(provider: str) -> dict[str, Any]:
    """The ``<provider>:`` section of ``$SKYD_CONFIG_DIR/config.yaml`` (empty when absent
    or unreadable)."""
    p = paths.config_dir() / "config.yaml"
    if not p.exists():
        return {}
    import yaml

    try:
        doc = yaml.safe_load(p.read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    sec = doc.get(provider) if isinstance(doc, dict) else None
    return dict(sec) if isinstance(sec, dict) else {}
