"""`testcloud`: a fake VM provider for the provisioning lifecycle tests.

- server.py: a fake "instances API" (aiohttp on 127.0.0.1, in a thread of the test process)
  whose instances are local sandboxes running real node agents;
- cloud.py: the provider (Cloud + Provisioner) over that API.

Registered by its one registry line, :data:`PLUGIN`, in ``$SKYD_CLOUD_PLUGINS``.
"""

PLUGIN = "testcloud=tests.fakes.testcloud.cloud:TestCloud"
