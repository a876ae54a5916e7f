"""``skyd catalog refresh aws``: the catalog from the EC2 describe APIs and the Price List
API, in the bundled catalog's shape (one row per instance type and zone id).

- regions: describe_regions; per region (a few at a time): describe_instance_types (vCPUs,
  memory, GPUs), describe_instance_type_offerings by zone id, describe_availability_zones
  (zone name -> id) and describe_spot_price_history (the newest Linux/UNIX price per type
  and zone);
- on-demand prices: pricing get_products (Linux, shared tenancy, no pre-installed software),
  per region.

The types kept are those with GPUs plus the CPU families the bundled catalog lists (the
catalog stays the size the planner is tuned for).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import anyio

from skyd import settings as knobs
from skyd.clouds.aws.session import Clients
from skyd.clouds.catalog_csv import canonical_name
from skyd.clouds.offering import Offering

PRICING_REGION = "us-east-1"
CONCURRENT_REGIONS = 4


def _families() -> set[str]:
    try:
        from skyd.clouds.catalog import DATA_DIR
        from skyd.clouds.catalog_csv import parse_rows

        rows = parse_rows("aws", (DATA_DIR / "aws.csv").read_text(), source="bundled")
        return {o.instance_type.split(".")[0] for o in rows if not o.accelerator}
    except (OSError, ValueError):
        return {"m6i", "c6i", "r6i"}


async def _types(ec2: Any, families: set[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    async for page in ec2.get_paginator("describe_instance_types").paginate():
        for t in page.get("InstanceTypes") or []:
            name = str(t["InstanceType"])
            gpus = (t.get("GpuInfo") or {}).get("Gpus") or []
            if not gpus and name.split(".")[0] not in families:
                continue
            out[name] = t
    return out


async def _on_demand(pricing: Any, region: str) -> dict[str, float]:
    flt = [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in (
        ("regionCode", region), ("operatingSystem", "Linux"), ("tenancy", "Shared"),
        ("preInstalledSw", "NA"), ("capacitystatus", "Used"))]
    prices: dict[str, float] = {}
    async for page in pricing.get_paginator("get_products").paginate(ServiceCode="AmazonEC2", Filters=flt):
        for raw in page.get("PriceList") or []:
            item = json.loads(raw) if isinstance(raw, str) else raw
            itype = ((item.get("product") or {}).get("attributes") or {}).get("instanceType")
            for term in ((item.get("terms") or {}).get("OnDemand") or {}).values():
                for dim in (term.get("priceDimensions") or {}).values():
                    usd = (dim.get("pricePerUnit") or {}).get("USD")
                    if itype and usd and float(usd) > 0:
                        prices[str(itype)] = float(usd)
    return prices


async def _spot(ec2: Any, types: list[str]) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], tuple[str, float]] = {}
    for i in range(0, len(types), 100):
        pager = ec2.get_paginator("describe_spot_price_history")
        async for page in pager.paginate(InstanceTypes=types[i:i + 100], StartTime=datetime.now(UTC),
                                         ProductDescriptions=["Linux/UNIX"]):
            for p in page.get("SpotPriceHistory") or []:
                key = (str(p["InstanceType"]), str(p["AvailabilityZone"]))
                ts = str(p.get("Timestamp") or "")
                if key not in out or ts > out[key][0]:
                    out[key] = (ts, float(p["SpotPrice"]))
    return {k: v for k, (_, v) in out.items()}


async def _region(clients: Clients, region: str, families: set[str]) -> list[Offering]:
    ec2 = await clients.client("ec2", region)
    pricing = await clients.client("pricing", PRICING_REGION)
    types = await _types(ec2, families)
    if not types:
        return []
    offers = await ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone-id",
        Filters=[{"Name": "instance-type", "Values": sorted(types)}]).build_full_result()
    azs = (await ec2.describe_availability_zones()).get("AvailabilityZones") or []
    zone_id = {str(z["ZoneName"]): str(z.get("ZoneId") or z["ZoneName"]) for z in azs}
    od = await _on_demand(pricing, region)
    spot = {(t, zone_id.get(z, z)): p for (t, z), p in (await _spot(ec2, sorted(types))).items()}
    rows: list[Offering] = []
    for o in offers.get("InstanceTypeOfferings") or []:
        itype, zid = str(o["InstanceType"]), str(o["Location"])
        t = types.get(itype)
        price, sp = od.get(itype), spot.get((itype, zid))
        if t is None or (price is None and sp is None):
            continue
        gpus = (t.get("GpuInfo") or {}).get("Gpus") or []
        acc = canonical_name(str(gpus[0]["Name"])) if gpus else None
        count = float(sum(int(g.get("Count") or 0) for g in gpus)) if gpus else 0.0
        gmem = (float((gpus[0].get("MemoryInfo") or {}).get("SizeInMiB") or 0) / 1024.0) if gpus else None
        rows.append(Offering(
            "aws", itype, acc, count, float((t.get("VCpuInfo") or {}).get("DefaultVCpus") or 0),
            round(float((t.get("MemoryInfo") or {}).get("SizeInMiB") or 0) / 1024.0, 2),
            region, zid, price, sp, gmem or None))
    return rows


async def fetch_catalog(clients: Clients, regions: list[str] | None = None) -> list[Offering]:
    """Every region's offerings (``regions``: only these; $SKYD_AWS_CATALOG_REGIONS too)."""
    env = knobs.AWS_CATALOG_REGIONS.get()
    if regions is None and env:
        regions = list(env)
    if regions is None:
        ec2 = await clients.client("ec2", PRICING_REGION)
        regions = sorted(str(r["RegionName"]) for r in (await ec2.describe_regions()).get("Regions") or [])
    families = await anyio.to_thread.run_sync(_families)
    out: list[Offering] = []
    sem = anyio.Semaphore(CONCURRENT_REGIONS)

    async def one(region: str) -> None:
        async with sem:
            out.extend(await _region(clients, region, families))

    async with anyio.create_task_group() as tg:
        for r in regions:
            tg.start_soon(one, r)
    return sorted(out, key=lambda o: (o.instance_type, o.region, o.zone or ""))
