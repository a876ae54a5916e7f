"""``skyd catalog refresh do`` / ``amddevcloud``: the GPU sizes the API lists (``GET
/v2/sizes``), one row per size and region, priced from ``price_hourly``. CPU-only sizes are
left out (the bundled catalogs list GPU droplets only)."""

from __future__ import annotations

from typing import Any

from skyd.clouds.do import config
from skyd.clouds.do.sizes import canonical, from_slug
from skyd.clouds.offering import Offering
from skyd.errors import CredentialsError


def size_offerings(cloud: str, sizes: list[dict[str, Any]]) -> list[Offering]:
    out: list[Offering] = []
    for s in sizes:
        slug = str(s.get("slug") or "")
        gi = s.get("gpu_info") or {}
        parsed = from_slug(slug)
        acc = canonical(str(gi.get("model") or "")) if gi else None
        acc = acc or (parsed[0] if parsed else None)
        if not acc:
            continue
        count = int(gi.get("count") or (parsed[1] if parsed else 1))
        vram = (gi.get("vram") or {}).get("amount")
        price = s.get("price_hourly")
        for region in s.get("regions") or []:
            out.append(Offering(
                cloud=cloud, instance_type=slug, accelerator=acc, accelerator_count=float(count),
                vcpus=float(s.get("vcpus") or 0), memory_gib=float(s.get("memory") or 0) / 1024,
                region=str(region), zone=None, price=float(price) if price else None,
                spot_price=None, accelerator_memory_gib=float(vram) / count if vram else None))
    return out


async def fetch(flavor: config.Flavor) -> list[Offering]:
    import anyio

    from skyd.clouds.do.api import DOAPI

    tok = await anyio.to_thread.run_sync(config.find_token, flavor)
    if tok is None:
        raise CredentialsError(f"no {flavor.title} token found", hint=flavor.hint)
    api = DOAPI(flavor, tok)
    try:
        return size_offerings(flavor.name, await api.sizes())
    finally:
        await api.close()


async def fetch_do() -> list[Offering]:
    return await fetch(config.DO)


async def fetch_amddevcloud() -> list[Offering]:
    return await fetch(config.AMD)
