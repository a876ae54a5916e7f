"""What the launch pipeline needs of the request it runs for (a typed Protocol).

The daemon's RequestContext (skyd.daemon.context) is one; a managed job's provisioning
brings its own small one (skyd.jobs.pipeline_ops). Provisioning and launch code take this,
never ``Any``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from skyd.daemon.store import Store

StageState = Literal["start", "done", "failed", "skipped"]


class LaunchContext(Protocol):
    """The request a launch runs for: its id, the store, its log and stage events."""

    @property
    def request_id(self) -> str: ...

    @property
    def store(self) -> Store: ...

    def log(self, text: str) -> None: ...

    async def stage(self, name: str, state: StageState, **info: Any) -> None: ...

    def emit(self, event: dict[str, Any]) -> None: ...

    async def set_result_partial(self, data: dict[str, Any]) -> None: ...
