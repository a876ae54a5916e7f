"""GPU names: the one canonicaliser over each provider's own GPU ids.

Every name skyd reads from a provider (a catalog row's ``AcceleratorName``, an API's GPU id
or model word, a driver's device name) goes through :func:`canonical_gpu`; every id skyd
sends (RunPod's ``gpuTypeId``) comes from :func:`provider_gpu_id`. Both read the provider's
table, a fact on its Cloud class (``gpu_ids``, ``skyd.clouds.base.REQUIRED_FACTS``): there
is no other map. Canonical names are the registry's
(`skyd.models.accelerators`); card variants stay distinct as in SkyPilot's catalogs:
``H100`` (PCIe), ``H100-SXM``, ``H100-NVL``, ``H200-SXM``, ``A100-80GB`` (PCIe),
``A100-80GB-SXM``. ``tests/clouds/test_gpu_names.py`` walks every row of the bundled neocloud
catalogs through this table.

Each table names its source next to it (``skyd/clouds/<provider>/cloud.py``: ``GPU_IDS``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

from skyd.models.accelerators import lookup_accelerator, normalize_device_name
from skyd.nodeagent.gpu import AMD_DEVICE_IDS

if TYPE_CHECKING:
    from skyd.clouds.base import GpuIds

#: canonical card -> the name a driver reports for it when the driver cannot tell the
#: variant (nvidia-smi says "H100 80GB HBM3" for SXM and "H100 PCIe" for PCIe, but skyd's
#: agent reports both as H100; "RTX A6000" is reported as A6000)
_DRIVER_NAME: dict[str, str] = {
    "H100-SXM": "H100", "H100-NVL": "H100", "H100-NVLINK": "H100", "H100-MEGA": "H100",
    "H200-SXM": "H200", "A100-80GB-SXM": "A100-80GB",
    "RTXA6000": "A6000", "RTXA5000": "A5000", "RTXA4000": "A4000",
}

_AMD_IN_TEXT = re.compile(r"MI\d{3}[A-Z]?", re.I)


def _index_of(rows: GpuIds) -> dict[str, str]:
    out: dict[str, str] = {}
    for canon, pid, more in rows:
        for spelling in (pid, *more):
            out.setdefault(spelling.lower(), canon)
    return out


_INDEX: dict[str, tuple[GpuIds, dict[str, str]]] = {}  # provider -> (its table, spelling -> canonical)


def gpu_ids(provider: str) -> GpuIds:
    """``provider``'s GPU table (its Cloud class's ``gpu_ids``); () for a name that is no
    provider of this process."""
    from skyd.clouds.base import provider_facts

    facts = provider_facts(provider)
    return facts.gpu_ids if facts is not None else ()


def provider_gpus() -> dict[str, GpuIds]:
    """Every provider's GPU table (those with one), by provider name: imports every
    provider's module."""
    from skyd.clouds.base import registered_clouds
    from skyd.errors import SkydError

    out: dict[str, GpuIds] = {}
    for p in registered_clouds():
        try:
            rows = gpu_ids(p)
        except SkydError:  # a plugin that does not load: `skyd check` and launches say so
            continue
        if rows:
            out[p] = rows
    return out


def _index(provider: str) -> dict[str, str]:
    rows = gpu_ids(provider)
    got = _INDEX.get(provider)
    if got is None or got[0] is not rows:  # a provider registered anew
        got = _INDEX[provider] = (rows, _index_of(rows))
    return got[1]


def provider_gpu_id(provider: str, canonical: str) -> str | None:
    """``provider``'s own id for the canonical GPU (what a create request names), None when
    the provider has no such card in the table."""
    for canon, pid, _ in gpu_ids(provider):
        if canon == canonical:
            return pid
    return None


def canonical_gpu(provider: str, name: str | None, device_id: str | int | None = None) -> str | None:
    """The canonical name for ``provider``'s GPU ``name`` (its id, another spelling it uses,
    or a name the registry knows) or PCI ``device_id`` (which wins: "0x74a1", 0x74A1); None
    when it is none of those."""
    if device_id is not None and device_id != "":
        try:
            dev = device_id if isinstance(device_id, int) else int(str(device_id).strip(), 16)
        except ValueError:
            dev = -1
        if dev in AMD_DEVICE_IDS:
            return AMD_DEVICE_IDS[dev]
    if not name:
        return None
    hit = _index(provider).get(name.strip().lower())
    if hit:
        return hit
    hit = lookup_accelerator(name)
    if hit:
        return hit
    m = _AMD_IN_TEXT.search(name)
    return lookup_accelerator(m.group(0).upper()) if m else None


@lru_cache(maxsize=4096)
def catalog_name(name: str) -> str:
    """A catalog row's ``AcceleratorName`` as skyd names it: the registry's spelling when it
    knows the name (case, spaces), else a provider's spelling from the table (``MI355X_288GB``),
    else the name unchanged. Variants are never folded (``H100-SXM`` stays ``H100-SXM``)."""
    hit = lookup_accelerator(name)
    if hit:
        return hit
    low = name.strip().lower()
    for rows in provider_gpus().values():
        hit = _index_of(rows).get(low)
        if hit:
            return hit
    return name


def same_card(ordered: str, detected: str) -> bool:
    """Whether a GPU the node's driver reported (``detected``, as skyd's agent names it) is
    the card that was ordered. The agent cannot tell SXM from PCIe, so an ``H100-SXM`` order
    is met by an ``H100`` report (and the reverse is not checked)."""
    want = lookup_accelerator(ordered) or ordered
    got = (lookup_accelerator(detected) or normalize_device_name(detected)
           or normalize_device_name(detected.replace("-", " ")) or detected)
    if want == got:
        return True
    return _DRIVER_NAME.get(want, want) == _DRIVER_NAME.get(got, got)
