"""Shared parts of the GPU "neocloud" providers (RunPod, Vultr, Hot Aisle, DigitalOcean,
Crusoe): a JSON-over-HTTP client with Retry-After handling (`http`), API errors to failover
scopes (`classify`), provider GPU names onto the canonical registry and the post-provision
GPU confirmation (`gpus`), and per-provider settings and keys (`settings`). The VM provisioner base for "one VM per
node, reached over SSH" providers is `skyd.clouds.vm`. See docs/neoclouds.md.
"""
