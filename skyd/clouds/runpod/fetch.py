"""``skyd catalog refresh runpod``: prices from ``gpuTypes`` (secure/community, on-demand
and spot, per GPU), multiplied out for 1/2/4/8 GPUs, at the data centers the bundled
catalog lists for that GPU (the API has no price per data center). Names come from the GPU
table (skyd.clouds.gpunames): "NVIDIA H100 80GB HBM3" is ``H100-SXM``, "NVIDIA H100 PCIe" is
``H100``, never one folded name. CPU rows are kept from the bundled catalog."""

from __future__ import annotations

from skyd.clouds.neocloud.gpus import canonical_gpu
from skyd.clouds.offering import Offering


async def fetch() -> list[Offering]:
    import anyio

    from skyd.clouds.catalog import load_catalog
    from skyd.clouds.runpod.api import KEY_HINT, RunPodAPI, find_key
    from skyd.errors import CredentialsError

    key, where = await anyio.to_thread.run_sync(find_key)
    if not key:
        raise CredentialsError("no RunPod API key found", hint=KEY_HINT)
    api = RunPodAPI(key, where)
    try:
        types = await api.gpu_types()
    finally:
        await api.close()
    bundled = load_catalog().by_cloud("runpod")
    places: dict[str, set[tuple[str, str | None]]] = {}
    shape = {o.instance_type: (o.vcpus, o.memory_gib) for o in bundled}
    for o in bundled:
        if o.accelerator:
            places.setdefault(o.accelerator, set()).add((o.region, o.zone))
    out: list[Offering] = []
    for t in types:
        name = canonical_gpu("runpod", str(t.get("id") or ""), None) or canonical_gpu(
            "runpod", str(t.get("displayName") or ""))
        if not name or name not in places:
            continue
        gmem = float(t.get("memoryInGb") or 0) or None
        for cloud, price_k, spot_k in (("SECURE", "securePrice", "secureSpotPrice"),
                                       ("COMMUNITY", "communityPrice", "communitySpotPrice")):
            price = t.get(price_k)
            if not price:
                continue
            spot = t.get(spot_k) or None
            for n in (1, 2, 4, 8):
                it = f"{n}x_{name}_{cloud}"
                vcpus, mem = shape.get(it, (0.0, 0.0))
                for region, zone in sorted(places[name], key=lambda x: (x[0], x[1] or "")):
                    out.append(Offering(
                        cloud="runpod", instance_type=it, accelerator=name,
                        accelerator_count=float(n), vcpus=vcpus, memory_gib=mem,
                        accelerator_memory_gib=gmem,
                        region=region, zone=zone, price=round(float(price) * n, 4),
                        spot_price=round(float(spot) * n, 4) if spot else None))
    # gpuTypes prices GPUs only: the CPU flavors (deployCpuPod) keep their bundled rows
    out.extend(o for o in bundled if not o.accelerator)
    return out
