"""Reaching a cluster's node agents from the daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
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


HEAD_TIMEOUT_S = 30.0


async def agent_healthy(prov: Provisioner, handle: ClusterHandle, timeout: float = 3.0,
                        head: Callable[[Any], Awaitable[Any]] | None = None) -> bool:
    """True when every node's agent answers Health. ``head``, if given, is then called with
    the head's client on the same connection (one TLS handshake less per refresh); it is
    best effort: what it raises is dropped and does not make the cluster unhealthy."""
    ok = True

    async def one(rank: int) -> None:
        nonlocal ok
        healthy = None
        try:
            # Connecting and Health within `timeout`; then the head's call with a bound of
            # its own (a slow answer there is not an unhealthy agent).
            with anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
                async with agent(prov, handle, rank) as c:
                    healthy = await c.health()
                    if healthy and rank == 0 and head is not None:
                        scope.deadline = anyio.current_time() + max(timeout, HEAD_TIMEOUT_S)
                        try:
                            await head(c)
                        except Exception:  # noqa: BLE001, S110 - best effort (docstring)
                            pass
        except Exception:  # noqa: BLE001, S110 - a failure before Health answered: unhealthy
            pass
        if not healthy:
            ok = False

    async with anyio.create_task_group() as tg:
        for rank in range(len(handle.nodes)):
            tg.start_soon(one, rank)
    return ok
