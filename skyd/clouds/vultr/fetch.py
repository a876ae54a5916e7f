"""``skyd catalog refresh vultr``: GPU plans from ``GET /plans-metal`` (bare metal) and
``GET /plans?type=vcg`` (GPU VMs), one row per plan and location; the GPU from the plan id
(``vbm-256c-2048gb-8-mi300x-gpu``: 8 GPUs) or its ``gpu_type`` (``NVIDIA_A100``).

A GPU VM plan carries no GPU count: only ``gpu_vram_gb``, the video memory of the plan
(Vultr's ``GET /plans`` docs; gpuhunt ``providers/vultr.py`` reads it the same way). The count
is that memory over one card's (:data:`CARD_GB`): ``160vram`` of A100 is 2 GPUs, and a
plan with less than one card's memory is a vGPU slice, listed with its fraction as the count
(``4vram`` of an 80 GB A100: 0.05 GPU), never as a whole GPU at the slice's price."""

from __future__ import annotations

import re
from typing import Any

from skyd.clouds.neocloud.gpus import canonical_gpu
from skyd.clouds.offering import Offering
from skyd.models.accelerators import get_accelerator_info

METAL_GPU = re.compile(r"-(\d+)-([a-z0-9]+)-gpu$")
#: GB of one card where Vultr's differs from the registry's (its A100s are 80 GB cards)
CARD_GB = {"A100": 80.0}


def gpu_count(gpu: str, vram_gb: float) -> float | None:
    """GPUs in a plan with ``vram_gb`` of ``gpu`` memory (a fraction for a vGPU slice)."""
    info = get_accelerator_info(gpu)
    card = CARD_GB.get(gpu) or (info.memory_gib if info else None)
    if not card or vram_gb <= 0:
        return None
    n = vram_gb / card
    return float(round(n)) if n >= 0.95 else round(n, 4)


def _hourly(p: dict[str, Any], key: str = "hourly_cost") -> float | None:
    if p.get(key) not in (None, ""):
        return float(p[key])
    if key == "hourly_cost" and p.get("monthly_cost"):
        return round(float(p["monthly_cost"]) / 730.0, 4)
    return None


def offerings(metal: list[dict[str, Any]], vms: list[dict[str, Any]]) -> list[Offering]:
    out: list[Offering] = []
    for p in metal:
        m = METAL_GPU.search(str(p.get("id") or ""))
        if not m:
            continue
        gpu = canonical_gpu("vultr", m.group(2)) or canonical_gpu("vultr", f"amd_{m.group(2)}")
        if not gpu:
            continue
        for loc in p.get("locations") or []:
            out.append(Offering("vultr", str(p["id"]), gpu, float(m.group(1)),
                                float(p.get("cpu_threads") or p.get("cpu_count") or 0),
                                round(float(p.get("ram") or 0) / 1024, 1), str(loc), None,
                                _hourly(p), _hourly(p, "hourly_cost_preemptible")))
    for p in vms:
        gpu = canonical_gpu("vultr", str(p.get("gpu_type") or "").lower())
        if not gpu:
            continue
        vram = float(p.get("gpu_vram_gb") or 0)
        count = gpu_count(gpu, vram)
        if count is None:
            continue
        for loc in p.get("locations") or []:
            out.append(Offering("vultr", str(p["id"]), gpu, count, float(p.get("vcpu_count") or 0),
                                round(float(p.get("ram") or 0) / 1024, 1), str(loc), None,
                                _hourly(p), None, round(vram / count, 2)))
    return out


async def fetch() -> list[Offering]:
    import anyio

    from skyd.clouds.vultr.api import KEY_HINT, VultrAPI, find_key
    from skyd.errors import CredentialsError

    key, where = await anyio.to_thread.run_sync(find_key)
    if not key:
        raise CredentialsError("no Vultr API key found", hint=KEY_HINT)
    api = VultrAPI(key, where)
    try:
        metal = await api.list_all("plans-metal", "plans_metal")
        vms = list((await api.call("GET", "plans", params={"type": "vcg", "per_page": "500"}) or {})
                   .get("plans") or [])
    finally:
        await api.close()
    return offerings(metal, vms)
