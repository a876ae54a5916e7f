"""An exec relay: the agent's byte stream over a command's stdin/stdout.

Where a node refuses TCP forwarding (sshd ``AllowTcpForwarding no``, some bastions), the
daemon still reaches the node agent: the agent also listens on a Unix socket in its node
dir, and per connection the transport runs ``RELAY`` on the node (``python3 -c RELAY
SOCKET``: stdlib only, Python >= 3.8), which copies its stdin to that socket and the socket
to its stdout. ``RelayListener`` is the daemon's side: a 127.0.0.1 listener that, for every
accepted connection, opens such a pipe (``open_pipe``) and pumps bytes both ways, so grpclib
connects to a plain local port whatever carries the bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from skyd.transports.relay_script import RELAY  # the script itself: stdlib only

__all__ = ["RELAY", "Pipe", "RelayListener"]

log = logging.getLogger("skyd.transports.relay")


class Reader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


class Writer(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def write_eof(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class Pipe:
    """One byte pipe to the agent: what it reads and writes, how to close it, and whether it
    is still usable (a pre-opened spare whose relay exited is not)."""

    reader: Reader
    writer: Writer
    close: Callable[[], None]
    alive: Callable[[], bool] = lambda: True


OpenPipe = Callable[[], Awaitable[Pipe]]

# Spare pipes are opened as soon as one is taken, so the next connections (agent calls come
# in bursts: health, submit, tail, queue) do not wait for an exec channel and a python3
# start. Unused spares are closed this long after the last connection.
SPARES = 2
SPARE_TTL_S = 20.0


async def _pump(src: Reader, dst: Writer, eof: bool) -> None:
    try:
        while True:
            data = await src.read(65536)
            if not data:
                break
            dst.write(data)
            await dst.drain()
    except (OSError, EOFError, asyncio.IncompleteReadError):
        return
    except Exception as e:  # noqa: BLE001 - a channel error ends this stream only
        log.debug("relay stream ended: %r", e)
        return
    if eof:
        with contextlib.suppress(Exception):
            dst.write_eof()


class RelayListener:
    """A 127.0.0.1 TCP (or Unix socket) listener whose every connection is relayed through
    ``open_pipe``."""

    def __init__(self, open_pipe: OpenPipe, name: str = "", *, spares: int = SPARES) -> None:
        self._open_pipe = open_pipe
        self.name = name
        self._server: asyncio.AbstractServer | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self.spares = spares
        self._spares: list[asyncio.Task[Pipe]] = []
        self._spare_timer: asyncio.TimerHandle | None = None
        self.port = 0
        self.connections = 0
        self.spares_used = 0

    async def start(self, *, unix_path: str | None = None) -> int:
        """Listen on 127.0.0.1 (a free port), or on ``unix_path`` (a client's private relay
        socket, skyd.sdk.kubehost)."""
        if unix_path is not None:
            self._server = await asyncio.start_unix_server(self._handle, unix_path)
            return 0
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    @property
    def serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

    # -- spare pipes ----------------------------------------------------------------------

    @staticmethod
    def _discard(task: asyncio.Task[Pipe]) -> None:
        if not task.done():
            task.cancel()
        elif not task.cancelled() and task.exception() is None:
            with contextlib.suppress(Exception):
                task.result().close()

    def _drop_spares(self) -> None:
        spares, self._spares = self._spares, []
        if self._spare_timer is not None:
            self._spare_timer.cancel()
            self._spare_timer = None
        for task in spares:
            self._discard(task)

    def _prefetch(self) -> None:
        if not self.serving:
            return
        while len(self._spares) < self.spares:
            self._spares.append(asyncio.ensure_future(self._open_pipe()))
        if self._spare_timer is not None:
            self._spare_timer.cancel()
        self._spare_timer = asyncio.get_running_loop().call_later(SPARE_TTL_S, self._drop_spares)

    async def _take_pipe(self) -> Pipe:
        while self._spares:
            # a finished spare first, else the oldest one (it is the furthest along)
            done = [t for t in self._spares if t.done()]
            task = done[0] if done else self._spares[0]
            self._spares.remove(task)
            try:
                pipe = await task
            except Exception:  # noqa: BLE001 - a failed spare: try the next, or a fresh one
                continue
            if pipe.alive():
                self.spares_used += 1
                self._prefetch()
                return pipe
            with contextlib.suppress(Exception):
                pipe.close()
        pipe = await self._open_pipe()
        self._prefetch()
        return pipe

    # -- connections ----------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        self.connections += 1
        pipe: Pipe | None = None
        try:
            try:
                pipe = await self._take_pipe()
            except Exception as e:  # noqa: BLE001 - the caller sees a dropped connection
                log.info("relay %s: could not open a pipe to the agent: %s", self.name, e)
                return
            r2, w2 = pipe.reader, pipe.writer
            async with anyio.create_task_group() as tg:

                async def down() -> None:
                    await _pump(r2, writer, False)  # the node side ended: end it all
                    tg.cancel_scope.cancel()

                tg.start_soon(down)
                tg.start_soon(_pump, reader, w2, True)
        finally:
            if pipe is not None:
                with contextlib.suppress(Exception):
                    pipe.close()
            with contextlib.suppress(Exception):
                writer.close()
            if task is not None:
                self._handlers.discard(task)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self._drop_spares()
        for t in list(self._handlers):
            t.cancel()
        self._handlers.clear()
