"""Provider GPU names -> skyd's canonical accelerator names and counts.

DigitalOcean size slugs read ``gpu-<model>x<count>-<memory>[-suffix]``
(``gpu-mi300x1-192gb``, ``gpu-mi300x8-1536gb``, ``gpu-h100x8-640gb``,
``gpu-mi300x1-192gb-devcloud``); ``gpu_info.model`` reads ``amd_mi300x`` / ``nvidia_h100``.
Crusoe's ``gpu_type`` reads ``MI300X-192GB`` or ``MI355X_288GB``.
"""

from __future__ import annotations

import re

#: provider model words (lower case) -> canonical name
MODELS = {
    "mi300x": "MI300X", "mi325x": "MI325X", "mi350x": "MI350X", "mi355x": "MI355X",
    "mi250x": "MI250X", "mi250": "MI250", "mi210": "MI210", "mi300a": "MI300A",
    "h100": "H100", "h200": "H200", "b200": "B200", "l40s": "L40S", "a100": "A100",
    "rtx4000": "RTX4000", "rtx6000": "RTX6000", "a6000": "A6000", "l40": "L40",
}
AMD = frozenset({"MI300X", "MI325X", "MI350X", "MI355X", "MI250X", "MI250", "MI210", "MI300A"})

_SLUG = re.compile(r"^gpu-([a-z0-9]+?)x(\d+)-(\d+)gb")


def canonical(model: str) -> str | None:
    """``amd_mi300x`` / ``MI300X-192GB`` / ``MI355X_288GB`` / ``mi300x`` -> ``MI300X``..."""
    m = model.strip().lower()
    for prefix in ("amd_", "nvidia_", "amd ", "nvidia "):
        m = m.removeprefix(prefix)
    m = re.split(r"[-_ ]", m, maxsplit=1)[0]
    return MODELS.get(m)


def from_slug(slug: str) -> tuple[str, int] | None:
    """(canonical GPU, count) of a DigitalOcean GPU size slug, None for other sizes."""
    m = _SLUG.match(slug.lower())
    if not m:
        return None
    word = m.group(1)  # "mi300" of gpu-mi300x1 (the model's own x), "h100" of gpu-h100x8
    name = MODELS.get(word + "x") or MODELS.get(word)
    return (name, int(m.group(2))) if name else None


def is_amd(accelerator: str | None) -> bool:
    return bool(accelerator) and str(accelerator).upper() in AMD
