"""Serving: services of replicas behind a load balancer, autoscaled and probed (docs/serve.md).
The daemon plugin is ``skyd.serve.verbs``; the CLI's ``skyd serve`` is ``skyd.serve.cli``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyd import face

_FACE = {
    "ServeDB": "state",
    "ServeManager": "manager",
}
__all__ = [
    "ServeDB", "ServeManager",
]
__getattr__ = face.lazy(__name__, _FACE)

if TYPE_CHECKING:
    from skyd.serve.manager import ServeManager
    from skyd.serve.state import ServeDB
