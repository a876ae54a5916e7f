"""The ``vultr`` provider: bare-metal servers (``vbm-...`` plans, ``/bare-metals``) and GPU
VMs (``/instances``) over Vultr's REST API v2 (aiohttp), reached over SSH
(see docs/neoclouds.md)."""
