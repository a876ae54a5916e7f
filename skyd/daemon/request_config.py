"""Each request's config (skyd.config): read once from the sources its payload names (the
caller's user file, project file, ``--config``; skyd's own file), checked at submit (a bad
file or key answers 400, exit 2, and makes no request), and active while the request runs
so providers read it through ``skyd.config.current()``.

Plugins add warners (``add_warner``): functions that turn a config into warning lines
(e.g. keys no provider acts on), emitted once at the start of each request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import anyio

from skyd import config as skyconfig

WARNERS: list[Callable[[Any], list[str]]] = []


def add_warner(fn: Callable[[Any], list[str]]) -> None:
    if fn not in WARNERS:
        WARNERS.append(fn)


def _task_config(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The ``config:`` block of the payload's (first) task document, if any."""
    text = payload.get("yaml")
    if not isinstance(text, str) or "config" not in text:
        return None
    from skyd.config.layers import safe_load_all

    docs = [d for d in safe_load_all(text, str(payload.get("yaml_path") or "<inline>"))
            if isinstance(d, dict)]
    for d in docs:
        if isinstance(d.get("config"), dict):
            return dict(d["config"])
    return None


def _load(payload: dict[str, Any]) -> Any:
    cfg = skyconfig.payload_config(payload)
    return cfg.with_task(_task_config(payload))


async def load_for(payload: Any) -> Any:
    """The request's config (blocking file reads run in a worker thread)."""
    return await anyio.to_thread.run_sync(_load, payload if isinstance(payload, dict) else {})


@contextlib.contextmanager
def active(cfg: Any) -> Iterator[None]:
    token = skyconfig.activate(cfg)
    try:
        yield
    finally:
        skyconfig._CURRENT.reset(token)


def warnings(cfg: Any) -> list[str]:
    out: list[str] = []
    for fn in WARNERS:
        try:
            out.extend(fn(cfg))
        except Exception:  # noqa: BLE001, S112 - a warner never fails a request
            continue
    return out
