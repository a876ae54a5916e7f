"""``skyd catalog refresh crusoe``: the project's VM types (``GET .../compute/vms/types``:
``product_name``, ``gpu_type``, ``num_gpu``, ``cpu_cores``, ``memory_gb``, as gpuhunt's
``providers/crusoe.py`` reads them) with a GPU, one row per location that ``GET /capacities`` lists for the type. Crusoe's API
has no prices: the on-demand $/GPU-hour comes from Crusoe's public price list
(:data:`GPU_HOUR`); a GPU without a known price gets an empty price (shown, never chosen
on cost)."""

from __future__ import annotations

from typing import Any

from skyd.clouds.gpunames import canonical_gpu
from skyd.clouds.offering import Offering
from skyd.errors import CredentialsError

#: on-demand $/GPU-hour from crusoe.ai/pricing, by canonical card (MI355X: no public price)
GPU_HOUR = {"MI300X": 3.45, "H100-SXM": 3.90, "H200-SXM": 4.29, "A100": 1.45, "A100-80GB": 1.65,
            "A100-80GB-SXM": 1.95, "L40S": 1.00, "A40": 0.90}


def type_offerings(types: list[dict[str, Any]], caps: list[dict[str, Any]]) -> list[Offering]:
    locs: dict[str, set[str]] = {}
    for c in caps:
        locs.setdefault(str(c.get("type")), set()).add(str(c.get("location")))
    out: list[Offering] = []
    for t in types:
        name = str(t.get("product_name") or t.get("name") or "")
        acc = canonical_gpu("crusoe", str(t.get("gpu_type") or ""))
        count = int(t.get("num_gpu") or 0)
        if not name or not acc or count <= 0:
            continue
        price = GPU_HOUR.get(acc)
        for loc in sorted(locs.get(name, ())):
            out.append(Offering(
                cloud="crusoe", instance_type=name, accelerator=acc, accelerator_count=float(count),
                vcpus=float(t.get("cpu_cores") or 0), memory_gib=float(t.get("memory_gb") or 0),
                region=loc, zone=None, price=round(price * count, 4) if price else None, spot_price=None))
    return out


async def fetch() -> list[Offering]:
    import anyio

    from skyd.clouds.crusoe import config
    from skyd.clouds.crusoe.api import CrusoeAPI

    keys = await anyio.to_thread.run_sync(config.find_keys)
    if keys is None:
        raise CredentialsError("no Crusoe keys found", hint=config.HINT)
    api = CrusoeAPI(keys)
    try:
        return type_offerings(await api.types(), await api.capacities())
    finally:
        await api.close()
