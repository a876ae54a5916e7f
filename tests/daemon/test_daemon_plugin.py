"""A daemon plugin for tests (loaded via SKYD_EXTRA_PLUGINS): a resumable verb."""

from __future__ import annotations

from typing import Any

from skyd.daemon.api_models import SleepBody
from skyd.daemon.builtins import sleep
from skyd.daemon.registry import register_verb

register_verb("test.resumable_sleep", sleep, resumable=True, body=SleepBody)


async def _lose_a_grpc_connection_then_cancel() -> None:
    """grpclib leaves a native cancel request on the task (tests.fakes.hangup); the cancel
    scope around that call, cancelled next, cannot absorb its own cancellation, which
    escapes the task."""
    import anyio

    from tests.fakes.hangup import lose_a_grpc_connection

    with anyio.CancelScope() as scope:
        await lose_a_grpc_connection()
        scope.cancel()
        await anyio.sleep(1)


async def lost_connection(ctx: Any, payload: dict[str, Any]) -> None:
    ctx.daemon.spawn("test-lost-connection", _lose_a_grpc_connection_then_cancel)
    await _lose_a_grpc_connection_then_cancel()


register_verb("test.lost_connection", lost_connection)
