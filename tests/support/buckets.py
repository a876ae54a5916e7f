"""Bucket MOUNT tests' shared pieces: whether FUSE mounts can work on this machine, which FUSE
mounts are under a folder, and an object's bytes in moto's S3."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

__all__ = ["fuse_problem", "fuse_mounts_under", "s3_object"]


def fuse_problem() -> str | None:
    """Why rclone cannot FUSE-mount here (None when it can)."""
    if shutil.which("rclone") is None:
        return "rclone is not installed"
    if not (shutil.which("fusermount3") or shutil.which("fusermount")):
        return "fusermount3 is not installed"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not usable here"
    return None


def fuse_mounts_under(d: Path) -> list[str]:
    """The FUSE mount points below ``d``, from /proc/self/mounts."""
    root = os.path.realpath(d)
    with open("/proc/self/mounts") as f:
        return [ln.split()[1] for ln in f
                if ln.split()[2].startswith("fuse") and ln.split()[1].startswith(root)]


def s3_object(s3: Any, bucket: str, key: str) -> bytes | None:
    """The object's bytes (None when the key does not exist)."""
    try:
        return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except s3.exceptions.NoSuchKey:
        return None
