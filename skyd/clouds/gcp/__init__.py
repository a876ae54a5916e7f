"""The ``gcp`` provider: Compute Engine VMs over the Compute REST API (aiohttp), with
credentials from gcloud-aio-auth (see docs/gcp.md).

Nothing heavy is imported here: ``skyd.cloudnames.PROVIDERS`` names
``skyd.clouds.gcp.cloud:GCPCloud`` and the daemon imports it on first use; gcloud-aio-auth
(and its JWT / cryptography imports) is imported only when a token is first needed.
"""
