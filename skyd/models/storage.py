"""``file_mounts`` values: local paths, bucket URIs, storage dicts -> one typed FileMount."""

from __future__ import annotations

import contextvars
import os
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import model_validator

from skyd.models._errors import check_keys, fail
from skyd.models.resources import SpecModel

BUCKET_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://")
STORES = ("S3", "GCS", "AZURE", "R2", "IBM", "OCI", "NEBIUS", "COREWEAVE", "VASTDATA", "HF",
          "VOLUME")
MODES = ("MOUNT", "COPY", "MOUNT_CACHED")
DEFAULT_MODE = "MOUNT"
_STORAGE_KEYS = ("name", "source", "store", "persistent", "mode", "mount_options", "type",
                 "config", "_is_sky_managed", "_bucket_sub_path", "_force_delete")


def is_bucket_uri(s: str) -> bool:
    return bool(BUCKET_RE.match(s))


# A request from a client on another host: its local paths (as resolved below) -> where
# the daemon rebuilt them from the upload (skyd.pipeline.uploads). Set around one load.
UPLOADED_PATHS: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "UPLOADED_PATHS", default=None)


def resolve_local(path: str, base_dir: Path) -> str:
    """Relative local paths -> absolute against ``base_dir``; ``~`` and absolute kept (then
    mapped to their uploaded copy when the client is on another host)."""
    if is_bucket_uri(path):
        return path
    out = path if path.startswith("~") or os.path.isabs(path) else os.path.normpath(
        str(base_dir / path))
    uploaded = UPLOADED_PATHS.get()
    return uploaded.get(out, out) if uploaded else out


class FileMount(SpecModel):
    """``kind`` is ``local`` (rsync a path), ``bucket`` (a cloud URI) or ``storage``."""

    _what: ClassVar[str] = "file_mounts entry"
    kind: Literal["local", "bucket", "storage"]
    source: str | list[str] | None = None
    name: str | None = None
    store: str | None = None
    persistent: bool | None = None
    mode: Literal["MOUNT", "COPY", "MOUNT_CACHED"] | None = None
    type: str | None = None
    mount_options: str | None = None
    config: dict[str, Any] | None = None
    internal: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _forms(cls, data: Any) -> Any:
        if isinstance(data, str):
            if not data.strip():
                fail("empty file_mounts source", "give a local path, a bucket URI or a mapping")
            return {"kind": "bucket" if is_bucket_uri(data) else "local", "source": data}
        if not isinstance(data, dict):
            fail(f"a file_mounts value must be a path, a URI or a storage mapping, got {data!r}")
        if "kind" in data:
            return data
        check_keys(data, _STORAGE_KEYS, "storage mapping")
        d = {k: v for k, v in data.items() if not k.startswith("_")}
        internal = {k: v for k, v in data.items() if k.startswith("_")}
        d["kind"] = "storage"
        if internal:
            d["internal"] = internal
        if not d.get("name") and not d.get("source"):
            fail("a storage mapping needs a name or a source",
                 "e.g. {name: my-bucket, source: ./data, mode: COPY}")
        src = d.get("source")
        if isinstance(src, list) and not src:
            fail("source list is empty", sub=("source",))
        if isinstance(d.get("store"), str):
            d["store"] = d["store"].strip().upper()
            if d["store"] not in STORES:
                fail(f"unknown store {data['store']!r}", f"one of {', '.join(STORES)}",
                     sub=("store",))
        if isinstance(d.get("mode"), str):
            d["mode"] = d["mode"].strip().upper()
            if d["mode"] not in MODES:
                fail(f"unknown mode {data['mode']!r}", f"one of {', '.join(MODES)}", sub=("mode",))
        if d.get("mode") is None:
            d["mode"] = DEFAULT_MODE
        if d.get("persistent") is None:
            d["persistent"] = True
        return d

    def to_normalized(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)
