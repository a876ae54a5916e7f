"""``skyd show-gpus --infra slurm[/<cluster>]``: GPUs per partition, free and total, read live
from every cluster's ``scontrol show partition/node`` over SSH (not the catalog)."""

from __future__ import annotations

from typing import Any


async def gpu_rows(cluster: str | None = None) -> list[dict[str, Any]]:
    from skyd.clouds.slurm.cloud import SlurmCloud

    cloud = SlurmCloud()
    try:
        reports = await cloud.probe(cluster)
    finally:
        await cloud.close()
    rows: list[dict[str, Any]] = []
    for r in reports:
        if not r.ok:
            rows.append({"cluster": r.cluster, "partition": None, "accelerator": None, "gres": None,
                         "per_node": 0, "total": 0, "free": 0, "error": r.message})  # fmt: skip
            continue
        for p in r.partitions:
            if not p.get("gpus_per_node"):
                continue
            rows.append({"cluster": r.cluster, "partition": p["name"], "accelerator": p.get("accelerator"),
                         "gres": f"gpu:{p.get('gres_type') or ''}".rstrip(":"), "per_node": p["gpus_per_node"],
                         "total": p["total_gpus"], "free": p["free_gpus"], "nodes": len(p.get("nodes") or [])})  # fmt: skip
    return rows
