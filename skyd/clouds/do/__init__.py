"""The ``do`` (DigitalOcean) and ``amddevcloud`` (AMD Developer Cloud) providers: GPU
droplets over the DigitalOcean REST API v2 (aiohttp). AMD Developer Cloud serves the same
API at another base URL, so both names share this package; see docs/neoclouds-do-crusoe.md.

HTTP goes through the one neocloud client (``skyd.clouds.neocloud.http``); ``sizes.py``
reads size slugs into GPU counts.
"""
