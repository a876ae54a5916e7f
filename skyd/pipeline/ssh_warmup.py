"""The ``ssh`` infra inside the daemon (a daemon plugin module, see skyd.daemon.plugins; it
lives above the clouds, so the ssh provider itself never imports the daemon).

Importing it registers the ``ssh`` cloud (so the planner offers pool hosts) and two hooks:
- at start, in the background: probe pool hosts that have no cached facts yet (so the solver
  sees their GPUs) and build the agent zipapp once, so the first launch does not pay for it;
- at stop the daemon closes every loaded cloud (skyd.clouds.base.close_clouds), which
  closes the SSH connections (forwards included) the provisioner holds.
Agents keep running on the hosts; a restarted daemon reconnects on demand.
"""

from __future__ import annotations

import logging
from typing import Any

from skyd.clouds.base import get_cloud
from skyd.clouds.ssh.cloud import SSHCloud
from skyd.daemon.registry import on_startup

log = logging.getLogger("skyd.ssh")


async def warm_up(cloud: SSHCloud) -> None:
    """Probe unprobed hosts and prebuild the agent zipapp (both best effort)."""
    ok, _ = await cloud.check()
    if not ok:
        return
    try:
        await cloud.probe_unprobed()
    except Exception as e:  # noqa: BLE001 - planning probes again on demand
        log.warning("ssh: probing pool hosts failed: %s", e)
    try:
        from skyd.transports.agent_deploy import agent_zipapp

        await agent_zipapp()
    except Exception as e:  # noqa: BLE001 - provisioning builds it again
        log.warning("ssh: building the agent zipapp failed: %s", e)


async def _startup(daemon: Any) -> None:
    cloud = get_cloud("ssh")
    assert isinstance(cloud, SSHCloud)
    daemon.spawn("ssh-warm-up", warm_up, cloud)


on_startup(_startup)
