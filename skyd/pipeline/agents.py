"""Reaching a cluster's node agents from the daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from skyd.clouds.base import ClusterHandle, Provisioner


@asynccontextmanager
async def agent(prov: Provisioner, handle: ClusterHandle, rank: int = 0) -> AsyncIterator[Any]:
    """An AgentClient connected to node `rank` of the cluster."""
    from skyd.nodeagent.client import AgentClient
    from skyd.transports.agent_deploy import client_ssl

    host, port = await prov.agent_endpoint(handle, rank)
    async with AgentClient(host, port, ssl=await client_ssl(handle.token)) as client:
        yield client


async def agent_healthy(prov: Provisioner, handle: ClusterHandle, timeout: float = 3.0) -> bool:
    """True when every node's agent answers Health."""
    ok = True

    async def one(rank: int) -> None:
        nonlocal ok
        try:
            with anyio.fail_after(timeout):
                async with agent(prov, handle, rank) as c:
                    if not await c.health():
                        ok = False
        except Exception:  # noqa: BLE001 - any failure means unhealthy
            ok = False

    async with anyio.create_task_group() as tg:
        for rank in range(len(handle.nodes)):
            tg.start_soon(one, rank)
    return ok
