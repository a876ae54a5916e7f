"""A full disk is an error message, not a dead daemon.

- **Reserve.** The daemon keeps a ballast file, ``SKYD_HOME/run/reserve`` (1 MiB,
  ``SKYD_DISK_RESERVE``), on the filesystem that holds its state. When a write fails because
  the disk is full, the ballast is deleted: the writes that end the failing request (its row,
  its last event) and the ones `status`, `down` and `logs` need then have room. A daemon that
  starts on a full disk deletes it first thing (degraded start). It is made again by
  :func:`keep_reserve` once the filesystem has room for it several times over, so a
  recovery needs nobody.
- **What fails** is the request whose write failed: it ends FAILED with
  ``disk full at PATH`` (the file that could not be written), never the daemon.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
from pathlib import Path

import anyio

from skyd import paths, settings

log = logging.getLogger("skyd.daemon.diskspace")

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def reserve_bytes() -> int:
    try:
        return max(0, settings.DISK_RESERVE.get())
    except settings.SettingError:
        return settings.DISK_RESERVE.default


def reserve_path() -> Path:
    return paths.home() / "run" / "reserve"


def is_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
        return True
    return isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc).lower()


def free_bytes(path: Path) -> int:
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def release() -> bool:
    """Delete the ballast (room for the writes that end a failure); True if it was there."""
    try:
        os.unlink(reserve_path())
    except FileNotFoundError:
        return False
    except OSError:
        return False
    log.warning("disk full under %s: released the %d-byte reserve", paths.home(), reserve_bytes())
    return True


def ensure() -> bool:
    """Make the ballast when it is missing and the filesystem has room for it 4 times over.
    True when it exists afterwards. Blocking: call it from a worker thread."""
    size = reserve_bytes()
    p = reserve_path()
    if size == 0 or p.exists():
        return True
    if free_bytes(p.parent) < 4 * size:
        return False
    tmp = p.with_name("reserve.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            chunk = b"\0" * 65536
            left = size
            while left > 0:
                left -= os.write(fd, chunk[: min(left, len(chunk))])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, p)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


def start_degraded_if_full() -> bool:
    """At daemon start: a full disk releases the reserve before anything is written.
    True when the disk was full (the daemon starts degraded)."""
    home = paths.home()
    if free_bytes(home) >= 64 * 1024:
        return False
    release()
    return True


async def keep_reserve(interval: float = 5.0) -> None:
    """Root-group task: remake the ballast whenever there is room again."""
    had = reserve_path().exists()
    while True:
        ok = await anyio.to_thread.run_sync(ensure)
        if ok and not had:
            log.info("disk space is back under %s: reserve made again", paths.home())
        had = ok
        await anyio.sleep(interval)
