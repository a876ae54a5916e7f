"""Billing rules a plan shows next to its hourly cost.

A provider that bills a minimum reservation per machine however short its life states it on
its Cloud class (``minimum_billing_minutes``, e.g. Hot Aisle: ``MinimumReservationMinutes``
of its offers, 60 for its MI300X VMs).
"""

from __future__ import annotations


def minimum_charge(cloud: str, hourly_cost: float) -> tuple[float, float] | None:
    """(minutes, $) the provider bills at least for a cluster costing ``hourly_cost`` $/h."""
    from skyd.clouds.base import provider_facts

    facts = provider_facts(cloud)
    m = facts.minimum_billing_minutes if facts is not None else 0.0
    if not m:
        return None
    return m, round(hourly_cost * m / 60.0, 2)
