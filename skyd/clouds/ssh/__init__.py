"""The ``ssh`` infra: existing hosts in node pools (``ssh_node_pools.yaml``). See docs/ssh.md.

The cloud is listed in skyd.cloudnames.PROVIDERS; asyncssh is only imported when a
provisioner or a check runs.
"""

from __future__ import annotations

from skyd.clouds.ssh.cloud import SSHCloud

__all__ = ["SSHCloud"]
