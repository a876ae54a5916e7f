"""GCP's catalog shape: SkyPilot's GCP catalog lists machine types (a2/a3/a4/g2: no
accelerator, host price only) apart from GPU-only rows (no instance type, GPU price only).
These tables say which host machine type carries which GPUs (SkyPilot's defaults first), the
host of GPUs with no host family in the file (T4, V100, ...: ``n1-highmem-8``, an
approximation, docs/solver.md) and the hosts the files lack; skyd.clouds.catalog_csv pairs
the rows with them (GCPCloud.catalog_split_rows). Stdlib only: read when a catalog loads.
"""

from __future__ import annotations

from skyd.clouds.base import SplitRows

# GCP: (accelerator, count) -> host machine types that carry it (SkyPilot's defaults first).
GPU_HOSTS: dict[tuple[str, int], tuple[str, ...]] = {
    **{("A100", n): (f"a2-highgpu-{n}g",) for n in (1, 2, 4, 8)},
    ("A100", 16): ("a2-megagpu-16g",),
    **{("A100-80GB", n): (f"a2-ultragpu-{n}g",) for n in (1, 2, 4, 8)},
    **{("H100", n): (f"a3-highgpu-{n}g",) for n in (1, 2, 4, 8)},
    ("H100-MEGA", 8): ("a3-megagpu-8g",),
    ("H200", 8): ("a3-ultragpu-8g",),
    ("B200", 8): ("a4-highgpu-8g",),
    ("L4", 1): ("g2-standard-4", "g2-standard-8", "g2-standard-12", "g2-standard-16", "g2-standard-32"),
    ("L4", 2): ("g2-standard-24",),
    ("L4", 4): ("g2-standard-48",),
    ("L4", 8): ("g2-standard-96",),
}
HOST_FAMILIES = ("a2-", "a3-", "a4-", "g2-")

# Hosts the files lack. n1-highmem-8: GCP us-central1 list price (approximate, used everywhere).
# a4-highgpu-8g: the VM part is unknown, so the offering costs the GPU bundle only.
N1_HOST = ("n1-highmem-8", 8.0, 52.0, 0.473212, 0.0995)
MISSING_HOSTS: dict[str, tuple[float, float, float, float | None]] = {
    "a4-highgpu-8g": (224.0, 3968.0, 0.0, 0.0),
}


SPLIT_ROWS = SplitRows(host_families=HOST_FAMILIES, gpu_hosts=GPU_HOSTS, fallback_host=N1_HOST,
                       missing_hosts=MISSING_HOSTS)
