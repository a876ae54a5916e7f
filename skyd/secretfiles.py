"""Where a task's secret values rest: one 0600 JSON file per request or managed job.

``SKYD_HOME/secrets/`` (0700) holds ``requests/<request id>.json`` (the ``--secret`` values
and the values taken out of the YAML's ``secrets:``, for as long as the request runs) and
``jobs/<ref>.json`` (a managed job's per-task secrets, for as long as the job is not
terminal). Nothing else of skyd stores a secret value: request payloads and the managed
job's ``dag`` keep the keys with ``<redacted>`` values and a reference to the file.

Files are created 0600 (never chmod-ed after the fact) and fsynced; the ``a*`` functions
run the file I/O in a worker thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets as _random
from pathlib import Path
from typing import Any

import anyio

from skyd import paths

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def root() -> Path:
    return paths.home() / "secrets"


def _dir(kind: str) -> Path:
    return root() / kind


def request_file(request_id: str) -> Path:
    return _dir("requests") / f"{_checked(request_id)}.json"


def job_file(ref: str) -> Path:
    return _dir("jobs") / f"{_checked(ref)}.json"


def new_job_ref() -> str:
    return _random.token_hex(8)


def _checked(name: str) -> str:
    if not _NAME_RE.match(name):
        raise ValueError(f"bad secrets file name {name!r}")
    return name


def _mkdirs(d: Path) -> None:
    for p in (root(), d):
        p.mkdir(mode=0o700, parents=True, exist_ok=True)
        if p.stat().st_mode & 0o077:
            p.chmod(0o700)


def write(path: Path, data: dict[str, Any], *, exclusive: bool = False) -> None:
    """Write ``data`` as JSON to ``path`` with mode 0600. ``exclusive``: create it, failing
    with FileExistsError when it is there (callers write it before the row that refers to it,
    so a torn file has no owner and the next daemon start deletes it); else atomically
    replace it (temporary file, fsync, rename)."""
    _mkdirs(path.parent)
    target = path if exclusive else path.with_name(
        f".{path.name}.{os.getpid()}.{_random.token_hex(4)}.tmp")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        if not exclusive:
            os.replace(target, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(target)
        raise


def read(path: Path) -> dict[str, Any] | None:
    """The file's JSON, or None when there is no such file (or a torn one)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def names(kind: str) -> list[str]:
    """The ids of the files of ``kind`` ("requests" or "jobs") that exist now."""
    try:
        return sorted(p.stem for p in _dir(kind).glob("*.json"))
    except OSError:
        return []


async def awrite(path: Path, data: dict[str, Any], *, exclusive: bool = False) -> None:
    await anyio.to_thread.run_sync(lambda: write(path, data, exclusive=exclusive))


async def aread(path: Path) -> dict[str, Any] | None:
    return await anyio.to_thread.run_sync(read, path)


async def aremove(path: Path) -> None:
    await anyio.to_thread.run_sync(remove, path)


async def anames(kind: str) -> list[str]:
    return await anyio.to_thread.run_sync(names, kind)
