"""Bucket URIs, bucket-name rules and the bucket plan of a task (pure: no network).

This is what launch refuses about a task's bucket ``file_mounts`` before anything exists;
``skyd validate``, the daemon's submit checks and launch all run it (through
``skyd.models.precheck``). ``skyd.storage`` uploads, mounts and removes the buckets.

Naming rules (the provider's published ones):
- S3 (general purpose buckets): 3-63 characters of lowercase letters, digits, '.' and '-',
  a letter or digit first and last, no '..', not an IP address, not the reserved prefixes
  ``xn--``, ``sthree-``, ``amzn-s3-demo-`` nor the suffixes ``-s3alias``, ``--ol-s3``,
  ``.mrap``, ``--x-s3``, ``--table-s3``.
- GCS: lowercase letters, digits, '-', '_' and '.', a letter or digit first and last, 3-63
  characters (up to 222 with dots, each dot-separated part at most 63), not an IP address,
  not beginning with ``goog``, not containing ``google`` (or ``g00gle``).
- R2: 3-63 characters of lowercase letters, digits and '-', a letter or digit first and
  last.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from skyd.errors import InvalidSpecError

#: URI scheme -> store name (the stores skyd can mount, copy from and upload to).
SCHEMES = {"s3": "S3", "r2": "R2", "gs": "GCS"}
STORES = ("S3", "R2", "GCS")
MODES = ("COPY", "MOUNT", "MOUNT_CACHED")
_S3_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_GCS_NAME = re.compile(r"^[a-z0-9][a-z0-9._\-]*[a-z0-9]$")
_R2_NAME = re.compile(r"^[a-z0-9][a-z0-9\-]{1,61}[a-z0-9]$")
_S3_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_S3_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


@dataclass(frozen=True)
class BucketRef:
    store: str
    bucket: str
    prefix: str  # "" or "a/b/" (always ends with "/" when not empty)


def _ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def s3_name_problem(name: str, store: str = "S3") -> str | None:
    """Why ``name`` is not a valid bucket name for ``store`` (S3, GCS or R2), or None."""
    if store == "GCS":
        return _gcs_problem(name)
    if not 3 <= len(name) <= 63:
        return "must be 3 to 63 characters long"
    if store == "R2":
        if not _R2_NAME.match(name):
            return ("may contain only lowercase letters, digits and '-', and must begin and"
                    " end with a letter or digit")
        return None
    if not _S3_NAME.match(name):
        return ("may contain only lowercase letters, digits, '.' and '-', and must begin and"
                " end with a letter or digit")
    if ".." in name or ".-" in name or "-." in name:
        return "may not contain '..', '.-' or '-.'"
    if _ip(name):
        return "may not be formatted as an IP address"
    if name.startswith(_S3_PREFIXES) or name.endswith(_S3_SUFFIXES):
        return ("may not use the reserved prefixes " + ", ".join(_S3_PREFIXES)
                + " or suffixes " + ", ".join(_S3_SUFFIXES))
    return None


def _gcs_problem(name: str) -> str | None:
    parts = name.split(".")
    if not 3 <= len(name) <= (222 if len(parts) > 1 else 63):
        return "must be 3 to 63 characters long (up to 222 with dots)"
    if any(not 1 <= len(p) <= 63 for p in parts):
        return "must have dot-separated parts of 1 to 63 characters"
    if not _GCS_NAME.match(name):
        return ("may contain only lowercase letters, digits, '.', '_' and '-', and must"
                " begin and end with a letter or digit")
    if _ip(name):
        return "may not be formatted as an IP address"
    if name.startswith("goog") or "google" in name or "g00gle" in name:
        return "may not begin with 'goog' or contain 'google'"
    return None


def check_bucket_name(name: str, field: str, store: str = "S3") -> None:
    why = s3_name_problem(name, store)
    if why is not None:
        raise InvalidSpecError(f"{name[:80]!r} is not a valid bucket name ({store}): it {why}",
                               field=field, hint="e.g. my-dataset-2024 (the store's naming rules)")


def parse_uri(uri: str, field: str) -> BucketRef:
    scheme, sep, rest = uri.partition("://")
    store = SCHEMES.get(scheme.lower())
    if not sep or store is None:
        raise InvalidSpecError(
            f"bucket URI {uri[:80]!r} is not supported", field=field,
            hint=f"use {', '.join(s + '://' for s in SCHEMES)} (or a local path)")
    bucket, _, prefix = rest.partition("/")
    check_bucket_name(bucket, field, store)
    prefix = prefix.strip("/")
    return BucketRef(store, bucket, prefix + "/" if prefix else "")


@dataclass(frozen=True)
class BucketMount:
    dst: str
    store: str
    bucket: str
    prefix: str
    local_source: str | None = None  # uploaded into a bucket skyd creates
    persistent: bool = True
    mode: str = "COPY"  # COPY | MOUNT | MOUNT_CACHED

    @property
    def field(self) -> str:
        return f"file_mounts.{self.dst}"

    @property
    def uri(self) -> str:
        return f"{self.bucket_uri}/{self.prefix}"

    @property
    def bucket_uri(self) -> str:
        return f"{ {'GCS': 'gs'}.get(self.store, self.store.lower())}://{self.bucket}"


def plan_one(dst: str, fm: Any) -> BucketMount | None:
    """One file mount's bucket (None for a local path); InvalidSpecError naming the
    field when launch would refuse it."""
    kind = getattr(fm, "kind", "local")
    if kind == "local":
        return None
    field = f"file_mounts.{dst}"
    if kind == "bucket":
        ref = parse_uri(str(fm.source), field)
        return BucketMount(dst, ref.store, ref.bucket, ref.prefix)
    mode = (fm.mode or "MOUNT").upper()
    if mode not in MODES:
        raise InvalidSpecError(f"storage mode {mode} is not known", field=f"{field}.mode",
                               hint="use one of " + ", ".join(MODES))
    if isinstance(fm.source, list):
        raise InvalidSpecError("a list of sources is not supported", field=f"{field}.source",
                               hint="give one local path or one bucket URI")
    src = fm.source
    if src and "://" in src:
        ref = parse_uri(src, f"{field}.source")
        if fm.store and fm.store != ref.store:
            raise InvalidSpecError(f"store {fm.store} does not match source {src[:80]!r}",
                                   field=f"{field}.store",
                                   hint=f"drop store, or write store: {ref.store.lower()}")
        return BucketMount(dst, ref.store, ref.bucket, ref.prefix, mode=mode)
    store = (fm.store or "S3").upper()
    if store not in STORES:
        raise InvalidSpecError(f"store {store} is not supported", field=f"{field}.store",
                               hint="use store: s3 (or an S3-compatible endpoint), r2 or gcs")
    if not fm.name:
        raise InvalidSpecError("a local source needs a bucket name", field=f"{field}.name",
                               hint="add name: my-bucket (created, then uploaded to)")
    check_bucket_name(fm.name, f"{field}.name", store)
    return BucketMount(dst, store, fm.name, "", local_source=src,
                       persistent=bool(fm.persistent if fm.persistent is not None else True),
                       mode=mode)


def plan(task: Any) -> list[BucketMount]:
    """The task's bucket mounts, every one checked (mode, store, names, URIs); the first
    mistake raises InvalidSpecError naming its field. Pure: no network."""
    out: list[BucketMount] = []
    for dst, fm in (getattr(task, "file_mounts", None) or {}).items():
        m = plan_one(dst, fm)
        if m is not None:
            out.append(m)
    return out
