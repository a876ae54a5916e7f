"""A server on 127.0.0.1 that reads a gRPC client's first bytes and hangs up.

`await lose_a_grpc_connection()` makes one grpclib call to it: grpclib wakes the call with a
native ``Task.cancel()`` of the calling task and raises StreamTerminatedError instead, never
taking that cancel request back (as when a node agent dies mid-call).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import SocketAttribute, SocketStream


async def _hang_up(stream: SocketStream) -> None:
    await stream.receive()
    await anyio.sleep(0.2)
    await stream.aclose()


@asynccontextmanager
async def hang_up_server() -> AsyncIterator[int]:
    """Serve one connection on 127.0.0.1; yields the port. (No cancel scope of the caller's
    task is cancelled here: that task may be the one grpclib left a cancel request on.)"""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")

    async def one() -> None:
        async with listener, await listener.listeners[0].accept() as stream:
            await _hang_up(stream)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        yield int(listener.extra(SocketAttribute.local_port))


async def lose_a_grpc_connection() -> None:
    from grpclib.client import Channel

    from skyd.proto import skyd_agent as pb

    async with hang_up_server() as port:
        channel = Channel("127.0.0.1", port)
        try:
            await pb.NodeAgentStub(channel).get_status(pb.GetStatusRequest())
        except Exception:  # noqa: BLE001, S110 - grpclib's StreamTerminatedError
            pass
        finally:
            channel.close()
