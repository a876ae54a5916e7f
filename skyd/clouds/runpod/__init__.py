"""The ``runpod`` provider: pods over RunPod's GraphQL API (aiohttp), reached over SSH
through the public port mapped to 22 (see docs/neoclouds.md)."""
