"""FUSE mounts a node holds (bucket MOUNT / MOUNT_CACHED through rclone): finding and
unmounting them on this machine (local sandboxes) or on a remote node over its shell. The
providers tear nodes down through these, so they live below the clouds; skyd.storage mounts.
"""

from __future__ import annotations

import os
import posixpath
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

LogFn = Callable[[str], None]
MOUNTS = "mounts.list"  # the mount points made on the node, one a line (skyd.storage.rclone)


UNMOUNT = r"""
f={list}
[ -f "$f" ] || exit 0
i=0  # MOUNT_CACHED: wait (bounded) for uploads rclone would drop on unmount
while grep -rqs '"Dirty": true' {cache}/vfsMeta && [ $i -lt 240 ]; do sleep 0.25; i=$((i+1)); done
while IFS= read -r p; do
  [ -n "$p" ] || continue
  if mountpoint -q "$p" 2>/dev/null || grep -qs " $p fuse" /proc/mounts; then
    fusermount3 -u "$p" 2>/dev/null || fusermount -u "$p" 2>/dev/null \
      || fusermount3 -uz "$p" 2>/dev/null || fusermount -uz "$p" 2>/dev/null || umount -l "$p" 2>/dev/null
    echo "unmounted $p"
  fi
done < "$f"
rm -f "$f"
"""


async def unmount_node(sh: Any, log: LogFn) -> None:
    """Unmount what ``mount_on_node`` mounted on a remote node (lazily if busy)."""
    r = await sh.transport.run(
        UNMOUNT.format(list=shlex.quote(posixpath.join(sh.skyd_dir, MOUNTS)),
                       cache=shlex.quote(posixpath.join(sh.skyd_dir, "rclone-cache"))),
        timeout=180)
    for ln in r.stdout.splitlines():
        if ln.startswith("unmounted "):
            log(f"Unmounted {ln.removeprefix('unmounted ')} on {sh.label}")


def _unescape(p: str) -> str:
    return p.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def fuse_mounts_under(root: str | Path) -> list[str]:
    base = os.path.realpath(root).rstrip("/") + "/"
    out = []
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2].startswith("fuse"):
                    mp = _unescape(parts[1])
                    if (mp + "/").startswith(base):
                        out.append(mp)
    except OSError:
        return []
    return sorted(out, key=len, reverse=True)


WRITEBACK_WAIT_S = 60.0  # how long down/stop waits for MOUNT_CACHED uploads to finish


def _dirty(root: str | Path) -> list[Path]:
    """rclone cache metadata of files not uploaded yet (MOUNT_CACHED) below ``root``."""
    out = []
    r = Path(root)  # a node dir or a cluster dir of sandboxes; never a walk into the mounts
    for meta in [*r.glob(".skyd/rclone-cache/vfsMeta"), *r.glob("node-*/.skyd/rclone-cache/vfsMeta")]:
        for f in meta.rglob("*"):
            try:
                if f.is_file() and '"Dirty": true' in f.read_text(errors="replace"):
                    out.append(f)
            except OSError:
                continue
    return out


def bind_mounts_under(root: str | Path) -> list[str]:
    """Non-FUSE mount points below ``root`` (the shared binds a container's bucket MOUNT
    leaves when its cluster was never torn down), deepest first."""
    base = os.path.realpath(root).rstrip("/") + "/"
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                sep = parts.index("-") if "-" in parts else -1
                if len(parts) < 5 or sep < 0 or parts[sep + 1].startswith("fuse"):
                    continue
                mp = _unescape(parts[4])
                if (mp + "/").startswith(base) and mp + "/" != base:
                    out.append(mp)
    except OSError:
        return []
    return sorted(set(out), key=len, reverse=True)


def _unmount_blocking(root: str | Path, wait: bool) -> list[str]:
    import time

    done: list[str] = []
    mounts = fuse_mounts_under(root)
    if not mounts:
        _unbind(root)
        return done
    deadline = time.monotonic() + WRITEBACK_WAIT_S
    while wait and _dirty(root) and time.monotonic() < deadline:  # rclone drops pending uploads on unmount
        time.sleep(0.25)
    for mp in mounts:
        for argv in (["fusermount3", "-u", mp], ["fusermount", "-u", mp],
                     ["fusermount3", "-uz", mp], ["fusermount", "-uz", mp], ["umount", "-l", mp]):
            try:
                if subprocess.run(argv, capture_output=True, timeout=30).returncode == 0:  # noqa: S603
                    done.append(mp)
                    break
            except (OSError, subprocess.TimeoutExpired):
                continue
    _unbind(root)
    return done


def _unbind(root: str | Path) -> None:
    for mp in bind_mounts_under(root):
        try:
            subprocess.run(["umount", "-l", mp], capture_output=True, timeout=30)  # noqa: S603, S607
        except (OSError, subprocess.TimeoutExpired):
            continue


async def unmount_under(root: str | Path, log: LogFn | None = None, *,
                        wait: bool = True) -> list[str]:
    """Unmount every FUSE mount below ``root`` on this machine (lazily if busy); with
    ``wait``, first give MOUNT_CACHED's pending uploads up to WRITEBACK_WAIT_S to finish
    (rclone drops them at unmount). No wait for mounts a killed node left behind."""
    done = await anyio.to_thread.run_sync(_unmount_blocking, root, wait)
    if log is not None:
        for mp in done:
            log(f"Unmounted {mp}")
    return done
