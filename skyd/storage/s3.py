"""The Store protocol and its S3 implementation on aiobotocore.

The endpoint comes from ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (S3-compatible
services, R2) like every botocore client; SKYD_AWS_LOOPBACK_ONLY is honoured. Objects are
streamed in CHUNK-sized pieces both ways: no object is ever held whole in memory.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import anyio

from skyd.errors import CredentialsError, InvalidSpecError, NotFoundError

CHUNK = 8 * 1024 * 1024  # also the multipart part size (S3's minimum part is 5 MiB)
WRITE = 1024 * 1024  # download: bytes gathered before one file write


class Store(Protocol):
    name: str

    async def check_credentials(self) -> None: ...
    async def bucket_exists(self, bucket: str) -> bool: ...
    async def create_bucket(self, bucket: str) -> None: ...
    async def delete_bucket(self, bucket: str) -> None: ...
    def list_objects(self, bucket: str, prefix: str) -> AsyncIterator[tuple[str, int]]: ...
    async def download(self, bucket: str, key: str, dest: Path) -> int: ...
    async def upload(self, src: Path, bucket: str, key: str) -> int: ...
    async def close(self) -> None: ...


def _code(e: Exception) -> str:
    return str(getattr(e, "response", {}).get("Error", {}).get("Code", ""))


class S3Store:
    name = "S3"

    def __init__(self, region: str | None = None) -> None:
        from skyd.clouds.aws.session import Clients

        self.region = region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self._clients = Clients()

    async def _c(self) -> Any:
        return await self._clients.client("s3", self.region)

    async def check_credentials(self) -> None:
        from skyd.clouds.aws.session import guard_endpoint

        guard_endpoint("s3")
        if await self._clients.credentials() is None:
            raise CredentialsError(
                "no AWS credentials found for S3 storage",
                hint="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or configure ~/.aws/credentials")

    async def bucket_exists(self, bucket: str) -> bool:
        c = await self._c()
        try:
            await c.head_bucket(Bucket=bucket)
            return True
        except Exception as e:
            code = _code(e)
            if code in ("404", "NoSuchBucket", "NotFound"):
                return False
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                raise CredentialsError(f"access to bucket {bucket!r} was denied ({code})",
                                       hint="check the AWS credentials") from None
            raise

    async def create_bucket(self, bucket: str) -> None:
        c = await self._c()
        kw: dict[str, Any] = {"Bucket": bucket}
        if self.region != "us-east-1":
            kw["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        try:
            await c.create_bucket(**kw)
        except Exception as e:
            if _code(e) in ("BucketAlreadyExists", "BucketAlreadyOwnedByYou"):
                raise InvalidSpecError(f"bucket {bucket!r} already exists",
                                       field="file_mounts.name",
                                       hint="choose another name, or use it as a source") from None
            raise

    async def delete_bucket(self, bucket: str) -> None:
        """Empty the bucket, then delete it (a bucket already gone is not an error)."""
        c = await self._c()
        try:
            batch: list[dict[str, str]] = []
            async for key, _ in self.list_objects(bucket, ""):
                batch.append({"Key": key})
                if len(batch) == 1000:
                    await c.delete_objects(Bucket=bucket, Delete={"Objects": batch})
                    batch = []
            if batch:
                await c.delete_objects(Bucket=bucket, Delete={"Objects": batch})
            await c.delete_bucket(Bucket=bucket)
        except Exception as e:
            if _code(e) not in ("NoSuchBucket", "404"):
                raise

    async def list_objects(self, bucket: str, prefix: str) -> AsyncIterator[tuple[str, int]]:
        c = await self._c()
        pages = c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        async for page in pages:
            for o in page.get("Contents", ()):
                yield o["Key"], int(o["Size"])

    async def download(self, bucket: str, key: str, dest: Path) -> int:
        c = await self._c()
        try:
            r = await c.get_object(Bucket=bucket, Key=key)
        except Exception as e:
            if _code(e) in ("NoSuchKey", "404"):
                raise NotFoundError(f"s3://{bucket}/{key} does not exist") from None
            raise
        n = 0
        await anyio.to_thread.run_sync(lambda: dest.parent.mkdir(parents=True, exist_ok=True))
        buf = bytearray()  # network reads are small; files are written in <= WRITE pieces
        async with r["Body"] as body, await anyio.open_file(dest, "wb") as f:
            while chunk := await body.read(WRITE):
                buf += chunk
                n += len(chunk)
                if len(buf) >= WRITE:
                    await f.write(bytes(buf))
                    buf.clear()
            if buf:
                await f.write(bytes(buf))
        return n

    async def upload(self, src: Path, bucket: str, key: str) -> int:
        c = await self._c()
        size = (await anyio.Path(src).stat()).st_size
        async with await anyio.open_file(src, "rb") as f:
            if size <= CHUNK:
                await c.put_object(Bucket=bucket, Key=key, Body=await f.read())
                return size
            up = await c.create_multipart_upload(Bucket=bucket, Key=key)
            uid, parts, no = up["UploadId"], [], 1
            try:
                while data := await f.read(CHUNK):
                    p = await c.upload_part(Bucket=bucket, Key=key, UploadId=uid,
                                            PartNumber=no, Body=data)
                    parts.append({"PartNumber": no, "ETag": p["ETag"]})
                    no += 1
                await c.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid,
                                                  MultipartUpload={"Parts": parts})
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await c.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=uid)
                raise
        return size

    async def close(self) -> None:
        await self._clients.close()


def store_for(kind: str) -> Store:
    if kind in ("S3", "R2"):
        return S3Store()
    if kind == "GCS":
        from skyd.storage.gcs import GCSStore

        return GCSStore()
    raise InvalidSpecError(f"store {kind!r} is not supported", field="file_mounts.store",
                           hint="use store: s3, r2 or gcs (or an s3:// / r2:// / gs:// source)")
