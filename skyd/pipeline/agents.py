"""Reaching a cluster's node agents from the daemon.

Calls to an agent share one kept channel (TCP connection, TLS session, HTTP/2 connection):
a call on a fresh mutual-TLS channel cost 10.15 ms of CPU against 2.04 ms on a kept one
(bench/agent_tls_bench.py), and handshakes were a tenth of a daemon's CPU. Channels are
kept per event loop (a channel works only on its own loop), agent endpoint and cluster
credentials; up to MAX_BORROWERS tasks borrow one at once (HTTP/2 multiplexes: followed
log streams and unary calls), a channel whose block raised (cancellation included) is
closed once its last borrower is done and the next call connects afresh, and one nobody
borrowed for IDLE_S is closed at a later borrow (no background task). The loop's end
closes them.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from skyd.clouds.base import ClusterHandle, Provisioner

if TYPE_CHECKING:
    from skyd.nodeagent.client import AgentClient

IDLE_S = 30.0  # a channel nobody borrowed for this long is closed (at a later borrow)
MAX_CHANNELS = 256  # per event loop; beyond it the least recently used idle one is closed
# Blocks on one channel at once: an agent serves 100 streams per connection (h2's default)
# and queues the rest, and a block may hold one for as long as a followed log lasts; a
# block beyond it gets a channel of its own, closed at its end.
MAX_BORROWERS = 64

# (host, port, the cluster's TLS client context): the context stands for the cluster
# secret (one per secret and process, credentials.client_ssl), which is never a key.
_Key = tuple[str, int, ssl.SSLContext]


class _Kept:
    """A pooled client and the blocks using it."""

    __slots__ = ("client", "users", "used_at", "dropped")

    def __init__(self, client: AgentClient) -> None:
        self.client = client
        self.users = 0
        self.used_at = time.monotonic()
        self.dropped = False  # out of the pool: closed when its last borrower is done


class _Pool:
    """One event loop's channels, least recently used first."""

    def __init__(self) -> None:
        self.kept: dict[_Key, _Kept] = {}
        self.closer: AsyncGenerator[None, None] | None = None  # (the loop holds it weakly)

    def take(self, key: _Key, make: Callable[[], AgentClient]) -> _Kept:
        now = time.monotonic()
        for k in [k for k, v in self.kept.items() if not v.users and now - v.used_at > IDLE_S]:
            self.drop(k)
        kept = self.kept.pop(key, None)
        if kept is not None and kept.users >= MAX_BORROWERS:  # a channel of the block's own
            self.kept[key] = kept
            kept = _Kept(make())
            kept.dropped = True
        else:
            kept = kept or _Kept(make())
            self.kept[key] = kept  # the most recently used last
        kept.users += 1
        kept.used_at = now
        idle = [k for k, v in self.kept.items() if not v.users]
        for k in idle[: max(0, len(self.kept) - MAX_CHANNELS)]:
            self.drop(k)
        return kept

    def give_back(self, key: _Key, kept: _Kept, ok: bool) -> None:
        kept.users -= 1
        kept.used_at = time.monotonic()
        if not ok and self.kept.get(key) is kept:
            self.drop(key)
        elif kept.dropped and not kept.users:
            kept.client.close()

    def drop(self, key: _Key) -> None:
        kept = self.kept.pop(key)
        kept.dropped = True
        if not kept.users:
            kept.client.close()

    def close_all(self) -> None:
        for key in list(self.kept):
            self.drop(key)


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()


async def _closed_with_the_loop(pool: _Pool) -> AsyncGenerator[None, None]:
    """Started once per loop: asyncio.run (anyio.run) closes a loop's async generators
    before the loop, which closes its channels (left open, each would hold its connection
    and the loop until the process ends)."""
    try:
        yield
    finally:
        pool.close_all()  # (the loop's tasks have ended: none is in use)
        _POOLS.pop(asyncio.get_running_loop(), None)


async def _pool() -> _Pool:
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        for other in [lp for lp in _POOLS if lp.is_closed()]:  # ended some other way
            del _POOLS[other]
        pool = _POOLS[loop] = _Pool()
        pool.closer = _closed_with_the_loop(pool)
        await pool.closer.__anext__()
    return pool


def close_agent_channels() -> None:
    """Close this event loop's kept agent channels (those in use once their calls end)."""
    try:
        pool = _POOLS.get(asyncio.get_running_loop())
    except RuntimeError:  # no running loop: nothing of this loop's to close
        return
    if pool is not None:
        pool.close_all()


@asynccontextmanager
async def agent(prov: Provisioner, handle: ClusterHandle, rank: int = 0) -> AsyncIterator[Any]:
    """An AgentClient connected to node `rank` of the cluster: a kept channel, shared with
    the loop's other calls to that agent (module docstring); do not close it."""
    from skyd.nodeagent.client import AgentClient
    from skyd.transports.agent_deploy import client_ssl

    host, port = await prov.agent_endpoint(handle, rank)
    ctx = await client_ssl(handle.token)
    pool = await _pool()
    key = (host, int(port), ctx)
    kept = pool.take(key, lambda: AgentClient(host, port, ssl=ctx))
    ok = False
    try:
        async with kept.client.borrowed() as client:
            yield client
        ok = True
    finally:
        pool.give_back(key, kept, ok)


HEAD_TIMEOUT_S = 30.0


class _Unhealthy(Exception):
    """Ends a block whose agent did not answer Health: its channel is dropped."""


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
                    if not healthy:  # (health() catches what failed) the next check connects afresh
                        raise _Unhealthy
                    if rank == 0 and head is not None:
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
