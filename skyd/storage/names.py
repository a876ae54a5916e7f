"""Bucket URIs and bucket-name rules: they live in skyd.models.buckets (the launch's own
precheck, run by `skyd validate` and every submit too); re-exported here for storage."""

from __future__ import annotations

from skyd.models.buckets import SCHEMES, BucketRef, check_bucket_name, parse_uri, s3_name_problem

__all__ = ["SCHEMES", "BucketRef", "check_bucket_name", "parse_uri", "s3_name_problem"]
