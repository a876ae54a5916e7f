"""Which Hot Aisle VMs belong to which cluster tag.

Hot Aisle names a VM itself and keeps no label, so the tag -> VM names map lives here:
``$SKYD_HOME/hotaisle/vms.json`` (``{tag: {rank: vm name}}``), rewritten atomically (and
fsynced) the moment a create answers, before anything else happens. The only window is
between Hot Aisle's answer and that write (one local file write); see docs/neoclouds.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio

from skyd import paths

_lock = anyio.Lock()


def _path() -> Path:
    return paths.home() / "hotaisle" / "vms.json"


def _read() -> dict[str, dict[str, str]]:
    try:
        data = json.loads(_path().read_text())
    except (OSError, ValueError):
        return {}
    return {str(t): {str(r): str(n) for r, n in v.items()} for t, v in data.items() if isinstance(v, dict)}


def _write(data: dict[str, dict[str, str]]) -> None:
    p = _path()
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = p.with_name(f".vms.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump({t: v for t, v in data.items() if v}, f)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(p)


async def names(tag: str) -> dict[int, str]:
    data = await anyio.to_thread.run_sync(_read)
    return {int(r): n for r, n in data.get(tag, {}).items()}


async def put(tag: str, rank: int, name: str) -> None:
    async with _lock:
        def go() -> None:
            data = _read()
            data.setdefault(tag, {})[str(rank)] = name
            _write(data)

        await anyio.to_thread.run_sync(go)


async def drop(tag: str, name: str) -> None:
    async with _lock:
        def go() -> None:
            data = _read()
            data[tag] = {r: n for r, n in data.get(tag, {}).items() if n != name}
            _write(data)

        await anyio.to_thread.run_sync(go)
