"""The catalog-refresh readers of Vultr and Crusoe on answers shaped as the providers
document them: a Vultr GPU VM plan has no GPU count, only ``gpu_vram_gb`` (Vultr's ``GET
/plans`` docs; gpuhunt ``providers/vultr.py``), so vGPU slices are fractions and multi-GPU
plans several GPUs; a Crusoe VM type's vCPUs are ``cpu_cores`` (gpuhunt
``providers/crusoe.py``)."""

from __future__ import annotations

import pytest

from skyd.clouds.crusoe.catalog import type_offerings
from skyd.clouds.vultr.fetch import offerings

#: GET /plans?type=vcg, as Vultr documents a plan (no gpu_count field)
VCG = {"plans": [
    {"id": "vcg-a100-1c-6g-4vram", "vcpu_count": 1, "ram": 6144, "disk": 70, "disk_count": 1,
     "bandwidth": 1024, "monthly_cost": 90, "hourly_cost": 0.123, "type": "vcg",
     "locations": ["ewr"], "gpu_vram_gb": 4, "gpu_type": "NVIDIA_A100"},
    {"id": "vcg-a100-12c-120g-80vram", "vcpu_count": 12, "ram": 122880, "disk": 1400, "disk_count": 1,
     "bandwidth": 10240, "monthly_cost": 1750, "hourly_cost": 2.397, "type": "vcg",
     "locations": ["ewr", "sjc"], "gpu_vram_gb": 80, "gpu_type": "NVIDIA_A100"},
    {"id": "vcg-l40s-32c-375g-96vram", "vcpu_count": 32, "ram": 384000, "disk": 2200, "disk_count": 1,
     "bandwidth": 12288, "monthly_cost": 2400, "hourly_cost": 3.288, "type": "vcg",
     "locations": ["ord"], "gpu_vram_gb": 96, "gpu_type": "NVIDIA_L40S"},
    {"id": "vcg-mi300x-24c-240g-192vram", "vcpu_count": 24, "ram": 245760, "disk": 2000, "disk_count": 1,
     "bandwidth": 10240, "monthly_cost": 1450, "hourly_cost": 1.986, "type": "vcg",
     "locations": ["ord"], "gpu_vram_gb": 192, "gpu_type": "AMD_MI300X"},
], "meta": {"total": 4, "links": {"next": "", "prev": ""}}}


def test_vultr_gpu_plans_count_gpus_from_their_video_memory() -> None:
    rows = {(o.instance_type, o.region): o for o in offerings([], VCG["plans"])}
    slice_ = rows[("vcg-a100-1c-6g-4vram", "ewr")]
    # a 4 GB slice of an 80 GB A100 is 1/20 of a GPU, not a whole one at the slice's price
    assert slice_.accelerator == "A100" and slice_.accelerator_count == pytest.approx(0.05)
    whole = rows[("vcg-a100-12c-120g-80vram", "sjc")]
    assert whole.accelerator_count == 1.0 and whole.accelerator_memory_gib == 80
    two = rows[("vcg-l40s-32c-375g-96vram", "ord")]
    assert (two.accelerator, two.accelerator_count, two.price) == ("L40S", 2.0, 3.288)
    amd = rows[("vcg-mi300x-24c-240g-192vram", "ord")]
    assert (amd.accelerator, amd.accelerator_count, amd.vcpus) == ("MI300X", 1.0, 24.0)


def test_vultr_bare_metal_counts_from_the_plan_id() -> None:
    metal = [{"id": "vbm-256c-2048gb-8-mi300x-gpu", "cpu_count": 128, "cpu_threads": 256, "ram": 2097152,
              "disk": 3840, "monthly_cost": 12790.0, "hourly_cost": 17.52, "hourly_cost_preemptible": 14.72,
              "type": "EPYC", "locations": ["ord"]}]
    (o,) = offerings(metal, [])
    assert (o.accelerator, o.accelerator_count, o.vcpus, o.spot_price) == ("MI300X", 8.0, 256.0, 14.72)


#: GET /projects/{project_id}/compute/vms/types items, with the fields gpuhunt reads
CRUSOE_TYPES = [
    {"product_name": "mi300x-192gb.8x", "gpu_type": "MI300X-192GB", "num_gpu": 8, "cpu_cores": 176,
     "memory_gb": 1920, "disk_gb": 0, "cpu_type": "amd"},
    {"product_name": "h100-80gb-sxm-ib.8x", "gpu_type": "H100-SXM-80GB", "num_gpu": 8, "cpu_cores": 176,
     "memory_gb": 1440, "disk_gb": 7680, "cpu_type": "intel"},
    {"product_name": "l40s-48gb.1x", "gpu_type": "L40S-48GB", "num_gpu": 1, "cpu_cores": 8,
     "memory_gb": 147, "disk_gb": 0, "cpu_type": "amd"},
]


def test_crusoe_types_read_vcpus_from_cpu_cores_and_keep_card_variants() -> None:
    caps = [{"type": t["product_name"], "location": "us-east1-a", "quantity": 2} for t in CRUSOE_TYPES]
    rows = {o.instance_type: o for o in type_offerings(CRUSOE_TYPES, caps)}
    mi = rows["mi300x-192gb.8x"]
    assert (mi.accelerator, mi.accelerator_count, mi.vcpus, mi.memory_gib) == ("MI300X", 8.0, 176.0, 1920.0)
    assert mi.price == pytest.approx(8 * 3.45)
    h100 = rows["h100-80gb-sxm-ib.8x"]
    assert (h100.accelerator, h100.vcpus) == ("H100-SXM", 176.0)
    assert rows["l40s-48gb.1x"].vcpus == 8.0
