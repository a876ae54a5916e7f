"""``skyd catalog refresh hotaisle``: the team's available VMs (``OnDemandPrice`` is in
cents per hour), one row per GPU count and model in ``us-michigan-1``."""

from __future__ import annotations

from typing import Any

from skyd.clouds.neocloud.gpus import canonical_gpu
from skyd.clouds.offering import Offering

REGION = "us-michigan-1"


def offerings(avail: list[dict[str, Any]]) -> list[Offering]:
    best: dict[str, Offering] = {}
    for o in avail:
        spec = o.get("Specs") or {}
        gpus = spec.get("gpus") or []
        if not gpus:
            continue
        model = canonical_gpu("hotaisle", str(gpus[0].get("model") or ""))
        n = int(gpus[0].get("count") or 0)
        if not model or n < 1 or o.get("OnDemandPrice") in (None, ""):
            continue
        it = f"{n}x-{model}"
        off = Offering("hotaisle", it, model, float(n), float(spec.get("cpu_cores") or 0),
                       float(spec.get("ram_capacity") or 0) / 2**30 if float(spec.get("ram_capacity") or 0) > 2**20
                       else float(spec.get("ram_capacity") or 0),
                       REGION, None, round(float(o["OnDemandPrice"]) / 100.0, 4), None)
        if it not in best or (off.price or 0) < (best[it].price or 0):
            best[it] = off
    return sorted(best.values(), key=lambda x: x.accelerator_count)


async def fetch() -> list[Offering]:
    import anyio

    from skyd.clouds.hotaisle.api import KEY_HINT, HotAisleAPI, find_key
    from skyd.errors import CredentialsError

    key, team, where = await anyio.to_thread.run_sync(find_key)
    if not key or not team:
        raise CredentialsError("no Hot Aisle API key and team found", hint=KEY_HINT)
    api = HotAisleAPI(key, team, where)
    try:
        return offerings(await api.available())
    finally:
        await api.close()
