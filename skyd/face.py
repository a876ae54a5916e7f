"""A package's face: the names it offers other packages, loaded on first use.

A package's ``__init__`` lists what it offers (``__all__``) and where each name lives; the
module holding a name is imported only when the name is first asked for, so importing a
package costs nothing (the CLI's fast path imports ``skyd.cli`` and ``skyd.sdk`` packages
without pulling the daemon, aiohttp or a cloud SDK in)::

    _FACE = {"Store": "store", "RequestContext": "context"}
    __all__ = sorted(_FACE)
    __getattr__ = face.lazy(__name__, _FACE)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy"]


def lazy(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` resolving ``names`` (name -> submodule)."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
