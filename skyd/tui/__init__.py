"""The terminal UI (``skyd tui``): panes over the daemon's watch stream (docs/tui.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyd import face

_FACE = {
    "run": "app",
}
__all__ = [
    "run",
]
__getattr__ = face.lazy(__name__, _FACE)

if TYPE_CHECKING:
    from skyd.tui.app import run
