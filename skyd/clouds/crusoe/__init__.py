"""The ``crusoe`` provider: Crusoe Cloud VMs over its REST API v1alpha5 (aiohttp, HMAC-SHA256
signed requests); see docs/neoclouds-do-crusoe.md."""
