"""DigitalOcean size slugs -> (canonical GPU, count), through the one GPU-name table
(skyd.clouds.gpunames).

Slugs read ``gpu-<model>x<count>-<memory>[-suffix]`` (``gpu-mi300x1-192gb``,
``gpu-mi300x8-1536gb``, ``gpu-h100x8-640gb``, ``gpu-mi300x1-192gb-devcloud``);
``gpu_info.model`` reads ``amd_mi300x`` / ``nvidia_h100``.
"""

from __future__ import annotations

import re

from skyd.clouds.gpunames import canonical_gpu
from skyd.models.accelerators import get_accelerator_info

_SLUG = re.compile(r"^gpu-([a-z0-9]+?)x(\d+)-(\d+)gb")


def canonical(model: str, provider: str = "do") -> str | None:
    """``amd_mi300x`` / ``mi300x`` -> ``MI300X`` (None for a model the table lacks)."""
    return canonical_gpu(provider, model.strip()) if model.strip() else None


def from_slug(slug: str, provider: str = "do") -> tuple[str, int] | None:
    """(canonical GPU, count) of a DigitalOcean GPU size slug, None for other sizes."""
    m = _SLUG.match(slug.lower())
    if not m:
        return None
    word = m.group(1)  # "mi300" of gpu-mi300x1 (the model's own x), "h100" of gpu-h100x8
    name = canonical_gpu(provider, word + "x") or canonical_gpu(provider, word)
    return (name, int(m.group(2))) if name else None


def is_amd(accelerator: str | None) -> bool:
    info = get_accelerator_info(accelerator) if accelerator else None
    return info is not None and info.vendor == "amd"
