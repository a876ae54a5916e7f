"""The ``ssh`` infra: existing hosts in node pools (``ssh_node_pools.yaml``). See docs/ssh.md.

Importing this package registers the cloud; asyncssh is only imported when a provisioner or
a check runs.
"""

from __future__ import annotations

from skyd.clouds.base import register_cloud
from skyd.clouds.ssh.cloud import SSHCloud

register_cloud("ssh", SSHCloud)

__all__ = ["SSHCloud"]
