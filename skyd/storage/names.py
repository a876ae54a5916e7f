"""Bucket URIs and S3 bucket-name rules, checked where a task is loaded or planned."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from skyd.errors import InvalidSpecError

#: URI scheme -> store name.
SCHEMES = {"s3": "S3", "r2": "R2", "gs": "GCS"}
_S3_NAME = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_GCS_NAME = re.compile(r"^[a-z0-9][a-z0-9._\-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class BucketRef:
    store: str
    bucket: str
    prefix: str  # "" or "a/b/" (always ends with "/" when not empty)


def s3_name_problem(name: str, store: str = "S3") -> str | None:
    """Why ``name`` is not a valid bucket name for ``store`` (S3 rules; GCS also allows
    '_' and forbids a "goog" prefix), or None."""
    if not 3 <= len(name) <= 63:
        return "must be 3 to 63 characters long"
    if store == "GCS":
        if not _GCS_NAME.match(name):
            return ("may contain only lowercase letters, digits, '.', '_' and '-', and must"
                    " begin and end with a letter or digit")
        if name.startswith("goog") or "google" in name:
            return "may not begin with 'goog' or contain 'google'"
    elif not _S3_NAME.match(name):
        return ("may contain only lowercase letters, digits, '.' and '-', and must begin and"
                " end with a letter or digit")
    if ".." in name or ".-" in name or "-." in name:
        return "may not contain '..', '.-' or '-.'"
    try:
        ipaddress.ip_address(name)
        return "may not be formatted as an IP address"
    except ValueError:
        pass
    if name.startswith(("xn--", "sthree-")) or name.endswith(("-s3alias", "--ol-s3")):
        return "may not use the reserved prefixes xn--/sthree- or suffixes -s3alias/--ol-s3"
    return None


def check_bucket_name(name: str, field: str, store: str = "S3") -> None:
    why = s3_name_problem(name, store)
    if why is not None:
        raise InvalidSpecError(f"{name!r} is not a valid bucket name: it {why}", field=field,
                               hint="e.g. my-dataset-2024 (S3 naming rules)")


def parse_uri(uri: str, field: str) -> BucketRef:
    scheme, sep, rest = uri.partition("://")
    store = SCHEMES.get(scheme.lower())
    if not sep or store is None:
        raise InvalidSpecError(
            f"bucket URI {uri!r} is not supported", field=field,
            hint=f"use {' or '.join(s + '://' for s in SCHEMES)}")
    bucket, _, prefix = rest.partition("/")
    check_bucket_name(bucket, field, store)
    prefix = prefix.strip("/")
    return BucketRef(store, bucket, prefix + "/" if prefix else "")
