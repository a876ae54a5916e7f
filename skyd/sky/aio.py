"""Async variants (``await sky.launch_async(...)``, ``await sky.aio.get(rid)``): the
blocking calls of :mod:`skyd.sky.api` run in a worker thread, so an event loop never
blocks on the daemon's socket."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from skyd.sky import api


def _wrap(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def inner(*args: Any, **kw: Any) -> Any:
        import anyio

        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kw))

    return inner


launch = _wrap(api.launch)
exec = _wrap(api.exec)  # noqa: A001
status = _wrap(api.status)
queue = _wrap(api.queue)
stop = _wrap(api.stop)
start = _wrap(api.start)
down = _wrap(api.down)
autostop = _wrap(api.autostop)
cancel = _wrap(api.cancel)
tail_logs = _wrap(api.tail_logs)
get = _wrap(api.get)
stream_and_get = _wrap(api.stream_and_get)
optimize = _wrap(api.optimize)
