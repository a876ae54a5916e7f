"""Which Hot Aisle VMs belong to which cluster tag.

Hot Aisle names a VM itself and keeps no label, so the tag -> VM names map lives here:
``$SKYD_HOME/hotaisle/vms.json``, rewritten atomically (and fsynced):

- ``vms``: ``{tag: {rank: vm name}}``, written the moment a create answers;
- ``pending``: ``{tag: {rank: {"before": [team VM names], "specs": {...}}}}``, written
  before the create is sent. A daemon killed between the two leaves an intent: the next
  listing adopts the VM that appeared since ``before`` with those specs and that no record
  claims (see docs/neoclouds.md for the one race this leaves: a VM of the same specs made
  outside skyd in that same moment).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio

from skyd import paths

_lock = anyio.Lock()


def _path() -> Path:
    return paths.home() / "hotaisle" / "vms.json"


def _read() -> dict[str, Any]:
    try:
        data = json.loads(_path().read_text())
    except (OSError, ValueError):
        data = {}
    return {"vms": dict(data.get("vms") or {}), "pending": dict(data.get("pending") or {})}


def _write(data: dict[str, Any]) -> None:
    p = _path()
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = p.with_name(f".vms.{os.getpid()}.tmp")
    clean = {k: {t: v for t, v in data[k].items() if v} for k in ("vms", "pending")}
    with open(tmp, "w") as f:
        json.dump(clean, f)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(p)


async def _update(fn: Any) -> Any:
    async with _lock:
        def go() -> Any:
            data = _read()
            out = fn(data)
            _write(data)
            return out

        return await anyio.to_thread.run_sync(go)


async def names(tag: str) -> dict[int, str]:
    data = await anyio.to_thread.run_sync(_read)
    return {int(r): str(n) for r, n in data["vms"].get(tag, {}).items()}


async def pending(tag: str) -> dict[int, dict[str, Any]]:
    data = await anyio.to_thread.run_sync(_read)
    return {int(r): dict(v) for r, v in data["pending"].get(tag, {}).items()}


async def claimed() -> set[str]:
    """Every VM name any tag's record holds."""
    data = await anyio.to_thread.run_sync(_read)
    return {str(n) for v in data["vms"].values() for n in v.values()}


async def intend(tag: str, rank: int, before: list[str], specs: dict[str, Any]) -> None:
    await _update(lambda d: d["pending"].setdefault(tag, {}).__setitem__(
        str(rank), {"before": sorted(before), "specs": specs}))


async def put(tag: str, rank: int, name: str) -> None:
    def fn(d: dict[str, Any]) -> None:
        d["vms"].setdefault(tag, {})[str(rank)] = name
        d["pending"].get(tag, {}).pop(str(rank), None)

    await _update(fn)


async def cancel(tag: str, rank: int) -> None:
    await _update(lambda d: d["pending"].get(tag, {}).pop(str(rank), None))


async def drop(tag: str, name: str) -> None:
    def fn(d: dict[str, Any]) -> None:
        d["vms"][tag] = {r: n for r, n in d["vms"].get(tag, {}).items() if n != name}

    await _update(fn)
