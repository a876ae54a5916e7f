"""The ``aws`` provider: EC2 through aiobotocore (see docs/aws.md).

- ``session``: credentials (botocore's standard chain), one client per service and region,
  ``AWS_ENDPOINT_URL`` honoured as botocore does;
- ``errors``: EC2 error codes -> failover scopes, credential and bad-input errors;
- ``network``: skyd's SSH key, the per-cluster key pair, security group and placement group;
- ``images``: the default image per accelerator vendor (cached), architecture checks;
- ``provisioner``: create / wait / deploy the agent over SSH / query / stop / start /
  terminate / forget / open_ports;
- ``pricing``: ``skyd catalog refresh aws``;
- ``cloud``: the ``Cloud`` (async ``check``: sts get_caller_identity).

aiobotocore is imported only inside this package, and only when a call needs it.
"""
