"""One launchable catalog row: what the solver chooses among.

Catalog clouds (aws, gcp, runpod, ...) produce these from CSV rows (SkyPilot's vms.csv
columns); dynamic infras (``local``, ``ssh`` pools, ``kubernetes``) produce them at plan time
from what they detect. Prices are USD per hour for one whole instance (node).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Offering:
    cloud: str
    instance_type: str
    accelerator: str | None  # canonical name (skyd.models registry), None for CPU-only
    accelerator_count: float  # 0 for CPU-only; may be fractional (e.g. 0.5 of a GPU)
    vcpus: float
    memory_gib: float
    region: str
    zone: str | None
    price: float | None  # on-demand $/h; None = no on-demand offering
    spot_price: float | None  # spot $/h; None = no spot offering
    accelerator_memory_gib: float | None = None

    def hourly(self, use_spot: bool) -> float | None:
        return self.spot_price if use_spot else self.price
