"""Machine names shared by the one-machine-per-node providers (stdlib only)."""

from __future__ import annotations

import hashlib
import re


def plain_name(tag: str, rank: int) -> str:
    """``<tag>-<rank>``, lower case [a-z0-9-] (a tag that is not gets a hash of it): the
    names DigitalOcean droplets and Crusoe VMs have carried from the start, kept so that
    machines made before are found again."""
    base = re.sub(r"[^a-z0-9-]+", "-", tag.lower()).strip("-") or "skyd"
    if base != tag or len(base) > 50:
        base = base[:50].rstrip("-") + "-" + hashlib.sha256(tag.encode()).hexdigest()[:6]
    return f"{base}-{rank}"
