"""The ``hotaisle`` provider: AMD MI300X VMs over Hot Aisle's REST API (``Authorization:
Token``, team-scoped), reached over SSH as ``hotaisle`` (see docs/neoclouds.md)."""
