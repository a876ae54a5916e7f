"""The ``do`` (DigitalOcean) and ``amddevcloud`` (AMD Developer Cloud) providers: GPU
droplets over the DigitalOcean REST API v2 (aiohttp). AMD Developer Cloud serves the same
API at another base URL, so both names share this package; see docs/neoclouds-do-crusoe.md.

``rest.py`` (a JSON client that honours Retry-After) and ``sizes.py`` (size slugs -> GPU
counts) are used by the ``crusoe`` provider too.
"""
