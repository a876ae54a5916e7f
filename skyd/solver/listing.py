"""Data for ``skyd show-gpus``: accelerator offers across clouds, AMD and NVIDIA together."""

from __future__ import annotations

import difflib
from collections.abc import Collection
from typing import Any

from skyd.clouds.catalog import IMPLEMENTED, Catalog
from skyd.clouds.offering import Offering
from skyd.errors import NotFoundError


def _price_key(o: Offering) -> tuple[float, float]:
    p = o.price if o.price is not None else float("inf")
    s = o.spot_price if o.spot_price is not None else float("inf")
    return (p, s)


def gpu_listing(
    catalog: Catalog,
    name: str | None = None,
    count: float | None = None,
    cloud: str | None = None,
    all_regions: bool = False,
    enabled: Collection[str] | None = None,
) -> list[dict[str, Any]]:
    """One row per (accelerator, count, cloud) -- the cheapest -- or, with ``all_regions``, per
    (accelerator, count, cloud, instance type, region). Sorted by accelerator, count, price.

    Row keys: accelerator, count, cloud, instance_type, vcpus, memory_gib, price, spot_price,
    region, enabled, catalog_only, catalog_age_s. ``vcpus``/``memory_gib`` are None when the
    catalog does not know them; prices are None when not offered.
    """
    en = catalog.enabled if enabled is None else frozenset(enabled)
    if cloud is not None and cloud not in catalog.clouds:
        raise NotFoundError(f"unknown cloud {cloud!r} (known: {', '.join(catalog.clouds)})",
                            field="infra")
    if name is not None:
        acc = catalog.canonical_accelerator(name)
        if acc is None:
            near = difflib.get_close_matches(name, catalog.accelerator_names(), n=4, cutoff=0.4)
            raise NotFoundError(
                f"no cloud offers accelerator {name!r}" + (f"; did you mean {', '.join(near)}?" if near else ""),
                field="accelerator", hint="`skyd show-gpus` lists every accelerator")
        rows: Collection[Offering] = catalog.by_accelerator(acc, count)
    else:
        rows = [o for a in catalog.accelerator_names() for o in catalog.by_accelerator(a)
                if count is None or o.accelerator_count == count]
    best: dict[tuple[Any, ...], Offering] = {}
    for o in rows:
        if cloud is not None and o.cloud != cloud:
            continue
        key: tuple[Any, ...] = (o.accelerator, o.accelerator_count, o.cloud)
        if all_regions:
            key += (o.instance_type, o.region)
        cur = best.get(key)
        if cur is None or _price_key(o) < _price_key(cur):
            best[key] = o
    out = []
    for o in sorted(best.values(), key=lambda o: (o.accelerator or "", o.accelerator_count,
                                                  _price_key(o), o.cloud, o.region)):
        out.append({
            "accelerator": o.accelerator,
            "count": int(o.accelerator_count) if o.accelerator_count.is_integer() else o.accelerator_count,
            "cloud": o.cloud,
            "instance_type": o.instance_type,
            "vcpus": o.vcpus or None,
            "memory_gib": o.memory_gib or None,
            "accelerator_memory_gib": o.accelerator_memory_gib,
            "price": o.price,
            "spot_price": o.spot_price,
            "region": o.region,
            "enabled": o.cloud in en,
            "catalog_only": not IMPLEMENTED.get(o.cloud, True),
            "catalog_age_s": catalog.age(o.cloud),
        })
    return out
