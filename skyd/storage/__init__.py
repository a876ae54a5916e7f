"""Bucket storage for ``file_mounts``: stores (S3 and S3-compatible, GCS), bucket names, the
record of the buckets skyd created, and COPY/MOUNT onto nodes. Below the pipeline, above
clouds/transports (docs/storage.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyd import face

_FACE = {
    "on_down": "mounts",
    "plan": "mounts",
}
__all__ = [
    "on_down", "plan", "mounts",
]
__getattr__ = face.lazy(__name__, _FACE)

if TYPE_CHECKING:
    from skyd.storage.mounts import on_down, plan
