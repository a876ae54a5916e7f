"""Bucket storage for ``file_mounts``: stores (S3 and S3-compatible), bucket names, the
record of the buckets skyd created, and COPY onto nodes. Below the pipeline, above
clouds/transports."""
