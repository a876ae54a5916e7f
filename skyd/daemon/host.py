"""What the daemon core and its plugins see of the running daemon: a Protocol.

The core (registry, context, requests, server) and the features' plugins are typed against
:class:`Host`, not against :class:`skyd.daemon.app.Daemon` (the app wiring: start-up,
plugins, sockets, the pid file), so the core imports nothing of the app: the app is the
one module that builds the core and plugs the features in, at the top of the package.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from skyd.daemon.bus import EventBus
    from skyd.daemon.store import Store


class InFlight(Protocol):
    """The request manager as a read sees it: the requests running now, by id."""

    @property
    def active(self) -> dict[str, Any]: ...


class Host(Protocol):
    """The running daemon: its store, event bus, root task group and identity."""

    pid: int
    socket_path: Path
    shared_socket: Path | None
    started_mono: float

    @property
    def store(self) -> Store: ...

    @property
    def bus(self) -> EventBus: ...

    @property
    def requests(self) -> InFlight: ...

    @property
    def tg(self) -> TaskGroup: ...

    def spawn(self, name: str, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a long-lived task in the root task group (logged, never fatal)."""

    def stray_cancel(self) -> bool:
        """In a root-group task that caught a cancellation: True when the daemon is not
        stopping (the task must end there rather than re-raise it)."""


Hook = Callable[[Host], Awaitable[None]]
