"""The facts of clouds skyd has a bundled catalog for but no provider (stdlib only).

Their rows show in plans and ``show-gpus`` (never launch), so a plan that moves data from
or to them needs their egress prices. A cloud that gets a provider states its facts on its
``Cloud`` class instead (``skyd.clouds.base.REQUIRED_FACTS``), and its line here goes.
Figures: the providers' public price lists, as SkyPilot's ``get_egress_cost``.
"""

from __future__ import annotations

import math

from skyd.clouds.base import ProviderFacts

CATALOG_ONLY_FACTS: dict[str, ProviderFacts] = {
    "azure": ProviderFacts(((math.inf, 0.087),), 0.02, 0.0, ()),
    "oci": ProviderFacts(((math.inf, 0.0085),), None, 0.0, ()),
    "lambda": ProviderFacts(((math.inf, 0.0),), None, 0.0, ()),  # no egress fees
}
