"""Cost and time models: egress $/GB, transfer time, per-accelerator speed. Pure functions.

Egress (USD per GB leaving the source):
* zero within the same (cloud, region);
* same cloud, another region: the provider's ``inter_region_per_gb`` (None: the internet rate);
* another cloud: the source cloud's internet egress, tiered where the provider is
  (AWS $0.09 / $0.085 / $0.07 / $0.05 per GB over 10 TB / 40 TB / 100 TB steps, as SkyPilot).
Transfer time: a fixed 10 Gbps between different locations, zero within one (as SkyPilot).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skyd.clouds.base import ProviderFacts


# Each provider states its egress prices on its Cloud class (``egress_tiers``,
# ``inter_region_per_gb``: skyd.clouds.base.REQUIRED_FACTS); clouds skyd only has a catalog
# for, in skyd.clouds.catalog_only. A name that is neither (an input bucket's store, e.g.
# r2's "cloudflare") pays this.
DEFAULT_EGRESS_PER_GB = 0.10
BANDWIDTH_GBPS = 10.0
DEFAULT_RUNTIME_S = 3600.0

# Relative training throughput per accelerator (A100 = 1.0), for the "speed" runtime model.
# Rough public figures (dense BF16 training); unknown accelerators count as 1.0.
RELATIVE_SPEED: dict[str, float] = {
    "B200": 4.0, "H200": 2.4, "H100": 2.0, "H100-MEGA": 2.1, "H100-NVL": 1.9, "GH200": 2.2,
    "MI355X": 3.5, "MI325X": 2.3, "MI300X": 2.0, "A100-80GB": 1.1, "A100": 1.0,
    "L40S": 0.8, "L40": 0.6, "A6000": 0.45, "RTXA6000": 0.45, "RTX6000-Ada": 0.75,
    "RTX4090": 0.6, "RTX3090": 0.35, "A40": 0.45, "A10G": 0.35, "A10": 0.35, "L4": 0.3,
    "V100-32GB": 0.4, "V100": 0.4, "T4": 0.15, "RTXA5000": 0.35, "RTXA4500": 0.3,
    "RTXA4000": 0.25, "RTX4000-Ada": 0.3, "RTX6000": 0.3,
}


def _facts(cloud: str) -> ProviderFacts | None:
    from skyd.clouds.base import provider_facts

    return provider_facts(cloud)


def internet_egress_cost(cloud: str, gb: float) -> float:
    facts = _facts(cloud)
    if facts is None:
        return gb * DEFAULT_EGRESS_PER_GB
    tiers = facts.egress_tiers
    cost, lo = 0.0, 0.0
    for hi, rate in tiers:
        if gb <= lo:
            break
        cost += (min(gb, hi) - lo) * rate
        lo = hi
    return cost


def egress_cost(
    src_cloud: str, src_region: str | None, dst_cloud: str, dst_region: str | None, gb: float
) -> float:
    if gb <= 0:
        return 0.0
    if src_cloud == dst_cloud:
        if src_region == dst_region or src_region is None:
            return 0.0
        facts = _facts(src_cloud)
        rate = facts.inter_region_per_gb if facts is not None else None
        if rate is not None:
            return gb * rate
    return internet_egress_cost(src_cloud, gb)


def egress_time_s(same_location: bool, gb: float) -> float:
    if gb <= 0 or same_location:
        return 0.0
    return gb * 8.0 / BANDWIDTH_GBPS


# A runtime estimator: (task name, accelerator, count, instance type) -> seconds, or None
# when it has no opinion. Registered estimators are asked first, most recent first.
RuntimeEstimator = Callable[[str, str | None, float, str], float | None]
_ESTIMATORS: list[RuntimeEstimator] = []


def register_runtime_estimator(fn: RuntimeEstimator) -> RuntimeEstimator:
    """Plug in a runtime model (e.g. from past runs). Usable as a decorator; idempotent."""
    if fn not in _ESTIMATORS:
        _ESTIMATORS.insert(0, fn)
    return fn


def unregister_runtime_estimator(fn: RuntimeEstimator) -> None:
    if fn in _ESTIMATORS:
        _ESTIMATORS.remove(fn)


def estimated_runtime_s(task_name: str, acc: str | None, count: float, instance_type: str) -> float | None:
    for fn in _ESTIMATORS:
        v = fn(task_name, acc, count, instance_type)
        if v is not None:
            return float(v)
    return None


def runtime_s(
    estimated_s: float | None,
    ref_acc: str | None,
    ref_count: float,
    acc: str | None,
    count: float,
    use_speed: bool,
) -> float:
    """Runtime of a task on a candidate. The estimate is for the task's first candidate."""
    t = DEFAULT_RUNTIME_S if estimated_s is None else float(estimated_s)
    if not use_speed or not acc or not ref_acc or count <= 0 or ref_count <= 0:
        return t
    return t * (RELATIVE_SPEED.get(ref_acc, 1.0) * ref_count) / (RELATIVE_SPEED.get(acc, 1.0) * count)
