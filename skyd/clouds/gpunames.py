"""GPU names: the one table of each provider's own GPU ids, and the one canonicaliser.

Every name skyd reads from a provider (a catalog row's ``AcceleratorName``, an API's GPU id
or model word, a driver's device name) goes through :func:`canonical_gpu`; every id skyd
sends (RunPod's ``gpuTypeId``) comes from :func:`provider_gpu_id`. Both read
:data:`PROVIDER_GPUS` — there is no other map. Canonical names are the registry's
(`skyd.models.accelerators`); card variants stay distinct as in SkyPilot's catalogs:
``H100`` (PCIe), ``H100-SXM``, ``H100-NVL``, ``H200-SXM``, ``A100-80GB`` (PCIe),
``A100-80GB-SXM``. ``tests/test_gpu_names.py`` walks every row of the bundled neocloud
catalogs through this table.

Sources of the ids:

- runpod: ``gpuTypeId`` values, SkyPilot ``sky/provision/runpod/utils.py`` ``GPU_NAME_MAP``
  (and the AMD ids of RunPod's ``gpuTypes`` answer: ``AMD Instinct MI300X OAM``);
- vultr: the GPU word of plan ids (``vbm-256c-2048gb-8-mi300x-gpu``) and ``gpu_type`` of GPU
  VM plans (``AMD_MI300X``, ``NVIDIA_A100``; Vultr's ``GET /plans`` docs);
- hotaisle: ``Specs.gpus[].model`` of ``GET /teams/{team}/virtual_machines/available``;
- do / amddevcloud: ``gpu_info.model`` of ``GET /v2/sizes`` (``amd_mi300x``, DO's docs);
- crusoe: ``gpu_type`` of ``GET /projects/{id}/compute/vms/types`` (gpuhunt
  ``providers/crusoe.py`` ``GPU_TYPE_MAP``).
"""

from __future__ import annotations

import re
from functools import lru_cache

from skyd.models.accelerators import lookup_accelerator, normalize_device_name
from skyd.nodeagent.gpu import AMD_DEVICE_IDS

#: provider -> ((canonical name, the provider's id, other spellings it uses), ...). The id
#: is what a create request carries; the other spellings are only read.
PROVIDER_GPUS: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "runpod": (
        ("MI300X", "AMD Instinct MI300X OAM", ()),
        ("MI325X", "AMD Instinct MI325X OAM", ()),
        ("MI355X", "AMD Instinct MI355X OAM", ()),
        ("A100-80GB", "NVIDIA A100 80GB PCIe", ()),
        ("A100-80GB-SXM", "NVIDIA A100-SXM4-80GB", ()),
        ("A30", "NVIDIA A30", ()),
        ("A40", "NVIDIA A40", ()),
        ("B200", "NVIDIA B200", ()),
        ("H100", "NVIDIA H100 PCIe", ()),
        ("H100-SXM", "NVIDIA H100 80GB HBM3", ()),
        ("H100-NVL", "NVIDIA H100 NVL", ()),
        ("H200-SXM", "NVIDIA H200", ()),
        ("L4", "NVIDIA L4", ()),
        ("L40", "NVIDIA L40", ()),
        ("L40S", "NVIDIA L40S", ()),
        ("RTX3070", "NVIDIA GeForce RTX 3070", ()),
        ("RTX3080", "NVIDIA GeForce RTX 3080", ()),
        ("RTX3080Ti", "NVIDIA GeForce RTX 3080 Ti", ()),
        ("RTX3090", "NVIDIA GeForce RTX 3090", ()),
        ("RTX3090Ti", "NVIDIA GeForce RTX 3090 Ti", ()),
        ("RTX4070Ti", "NVIDIA GeForce RTX 4070 Ti", ()),
        ("RTX4080", "NVIDIA GeForce RTX 4080", ()),
        ("RTX4080Super", "NVIDIA GeForce RTX 4080 SUPER", ()),
        ("RTX4090", "NVIDIA GeForce RTX 4090", ()),
        ("RTX5090", "NVIDIA GeForce RTX 5090", ()),
        ("RTX2000-Ada", "NVIDIA RTX 2000 Ada Generation", ()),
        ("RTX4000-Ada", "NVIDIA RTX 4000 Ada Generation", ()),
        ("RTX5000-Ada", "NVIDIA RTX 5000 Ada Generation", ()),
        ("RTX6000-Ada", "NVIDIA RTX 6000 Ada Generation", ()),
        ("RTXA2000", "NVIDIA RTX A2000", ()),
        ("RTXA4000", "NVIDIA RTX A4000", ()),
        ("RTXA4500", "NVIDIA RTX A4500", ()),
        ("RTXA5000", "NVIDIA RTX A5000", ()),
        ("RTXA6000", "NVIDIA RTX A6000", ()),
        ("RTXPRO6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", ()),
    ),
    "vultr": (
        ("MI300X", "AMD_MI300X", ("mi300x", "amd_mi300x")),
        ("MI325X", "AMD_MI325X", ("mi325x", "amd_mi325x")),
        ("MI355X", "AMD_MI355X", ("mi355x", "amd_mi355x")),
        ("H100", "NVIDIA_H100", ("h100", "nvidia_h100")),
        ("A100", "NVIDIA_A100", ("a100", "nvidia_a100")),
        ("L40S", "NVIDIA_L40S", ("l40s", "nvidia_l40s")),
        ("A16", "NVIDIA_A16", ("a16", "nvidia_a16")),
        ("A40", "NVIDIA_A40", ("a40", "nvidia_a40")),
    ),
    "hotaisle": (
        ("MI300X", "MI300X", ()),
        ("MI325X", "MI325X", ()),
        ("MI355X", "MI355X", ()),
    ),
    "do": (
        ("MI300X", "amd_mi300x", ("mi300x",)),
        ("MI325X", "amd_mi325x", ("mi325x",)),
        ("MI350X", "amd_mi350x", ("mi350x",)),
        ("MI355X", "amd_mi355x", ("mi355x",)),
        ("H100", "nvidia_h100", ("h100",)),
        ("H200", "nvidia_h200", ("h200",)),
        ("L40S", "nvidia_l40s", ("l40s",)),
        ("RTX4000-Ada", "nvidia_rtx_4000_ada", ("rtx4000",)),
        ("RTX6000-Ada", "nvidia_rtx_6000_ada", ("rtx6000",)),
    ),
    "crusoe": (
        ("MI300X", "MI300X-192GB", ()),
        ("MI355X", "MI355X_288GB", ("MI355X-288GB",)),
        ("A100", "A100-PCIe-40GB", ()),
        ("A100-80GB", "A100-PCIe-80GB", ()),
        ("A100-80GB-SXM", "A100-SXM-80GB", ()),
        ("H100-SXM", "H100-SXM-80GB", ()),
        ("H200-SXM", "H200-SXM-141GB", ()),
        ("B200", "B200-SXM-180GB", ()),
        ("GB200", "GB200-NVL-186GB", ()),
        ("L40S", "L40S-48GB", ()),
        ("A40", "A40-PCIe-48GB", ()),
    ),
}
PROVIDER_GPUS["amddevcloud"] = PROVIDER_GPUS["do"]  # the same API (DigitalOcean's)

#: canonical card -> the name a driver reports for it when the driver cannot tell the
#: variant (nvidia-smi says "H100 80GB HBM3" for SXM and "H100 PCIe" for PCIe, but skyd's
#: agent reports both as H100; "RTX A6000" is reported as A6000)
_DRIVER_NAME: dict[str, str] = {
    "H100-SXM": "H100", "H100-NVL": "H100", "H100-NVLINK": "H100", "H100-MEGA": "H100",
    "H200-SXM": "H200", "A100-80GB-SXM": "A100-80GB",
    "RTXA6000": "A6000", "RTXA5000": "A5000", "RTXA4000": "A4000",
}

_AMD_IN_TEXT = re.compile(r"MI\d{3}[A-Z]?", re.I)


def _index(provider: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for canon, pid, more in PROVIDER_GPUS.get(provider, ()):
        for spelling in (pid, *more):
            out.setdefault(spelling.lower(), canon)
    return out


_INDEX: dict[str, dict[str, str]] = {p: _index(p) for p in PROVIDER_GPUS}


def provider_gpu_id(provider: str, canonical: str) -> str | None:
    """``provider``'s own id for the canonical GPU (what a create request names), None when
    the provider has no such card in the table."""
    for canon, pid, _ in PROVIDER_GPUS.get(provider, ()):
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
    hit = _INDEX.get(provider, {}).get(name.strip().lower())
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
    for idx in _INDEX.values():
        if low in idx:
            return idx[low]
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
