"""Billing rules a plan shows next to its hourly cost (stdlib only).

``MINIMUM_MINUTES``: providers that bill a minimum reservation per machine however short its
life (Hot Aisle: ``MinimumReservationMinutes`` of its offers, 60 for its MI300X VMs).
"""

from __future__ import annotations

MINIMUM_MINUTES: dict[str, float] = {"hotaisle": 60.0}


def minimum_charge(cloud: str, hourly_cost: float) -> tuple[float, float] | None:
    """(minutes, $) the provider bills at least for a cluster costing ``hourly_cost`` $/h."""
    m = MINIMUM_MINUTES.get(cloud)
    if not m:
        return None
    return m, round(hourly_cost * m / 60.0, 2)
