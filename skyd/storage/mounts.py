"""Bucket ``file_mounts``: plan (checked at load, before anything is provisioned),
preflight (credentials, source buckets exist), prepare (create a bucket for a local
source and upload it), COPY onto every node, and removal of ``persistent: false`` buckets
at ``down``.

COPY goes through the daemon: objects stream from the bucket into a staging directory
under SKYD_HOME (1 MiB pieces, never a whole object in memory), then the provider's
``sync_dir`` puts the tree on every node, as for a local file mount. MOUNT and
MOUNT_CACHED mount the bucket on every node with rclone (skyd.storage.rclone).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import anyio

from skyd.errors import InvalidSpecError, NotFoundError
from skyd.models.buckets import MODES, STORES, BucketMount, plan  # noqa: F401 - re-exported
from skyd.storage import db as sdb

LogFn = Callable[[str], None]
PARALLEL = 16  # concurrent object transfers
PROGRESS_S = 2.0


async def preflight(mounts: list[BucketMount]) -> None:
    """Credentials work and every source bucket exists (a bucket to be created may not)."""
    from skyd.storage.s3 import store_for

    for kind in sorted({m.store for m in mounts}):
        st = store_for(kind)
        try:
            await st.check_credentials()
            for m in mounts:
                if m.store != kind:
                    continue
                if m.local_source is not None:
                    if not await anyio.Path(Path(m.local_source).expanduser()).exists():
                        raise InvalidSpecError(f"local source {m.local_source!r} does not exist",
                                               field=f"{m.field}.source", hint="fix the path")
                    continue
                if not await st.bucket_exists(m.bucket):
                    raise InvalidSpecError(f"bucket {m.bucket_uri} does not exist", field=m.field,
                                           hint="check the bucket name (and the endpoint/account)")
        finally:
            await st.close()


async def prepare(store: Any, mounts: list[BucketMount], cluster: str, log: LogFn) -> None:
    """Create each bucket a local source goes to (recorded first) and upload the source."""
    from skyd.storage.s3 import store_for

    for m in mounts:
        if m.local_source is None:
            continue
        st = store_for(m.store)
        try:
            row = await sdb.get(store, m.bucket)
            if row is None and await st.bucket_exists(m.bucket):
                raise InvalidSpecError(
                    f"bucket {m.bucket!r} exists and was not created by skyd", field=m.field,
                    hint="choose another name, or use it as a source (source: s3://...)")
            if row is None or row["status"] == sdb.CREATING:
                await sdb.record(store, m.bucket, m.store, persistent=m.persistent,
                                 cluster=None if m.persistent else cluster,
                                 source=m.local_source)
                if not await st.bucket_exists(m.bucket):
                    await st.create_bucket(m.bucket)
                await sdb.mark_ready(store, m.bucket)
                log(f"Created bucket {m.uri}")
            n, size = await _upload_tree(st, Path(m.local_source).expanduser(), m.bucket, log)
            log(f"Uploaded {m.local_source} -> {m.uri}: {n} files, {size / 1e6:.1f} MB")
        finally:
            await st.close()


def _walk(root: Path) -> list[tuple[Path, str]]:
    if root.is_file():
        return [(root, root.name)]
    return [(p, p.relative_to(root).as_posix()) for p in sorted(root.rglob("*")) if p.is_file()]


async def _upload_tree(st: Any, root: Path, bucket: str, log: LogFn) -> tuple[int, int]:
    files = await anyio.to_thread.run_sync(_walk, root)
    prog = _Progress(f"upload to {bucket}", len(files), log)
    limit = anyio.CapacityLimiter(PARALLEL)

    async def one(p: Path, key: str) -> None:
        async with limit:
            prog.add(await st.upload(p, bucket, key))

    async with anyio.create_task_group() as tg:
        for p, key in files:
            tg.start_soon(one, p, key)
    return prog.files, prog.bytes


class _Progress:
    def __init__(self, what: str, total: int, log: LogFn) -> None:
        self.what, self.total, self.log = what, total, log
        self.files = self.bytes = 0
        self.t0 = self.last = time.monotonic()

    def add(self, n: int) -> None:
        self.files += 1
        self.bytes += n
        now = time.monotonic()
        if now - self.last >= PROGRESS_S:
            self.last = now
            rate = self.bytes / max(now - self.t0, 1e-6) / 1e6
            self.log(f"  {self.what}: {self.files}/{self.total} files,"
                     f" {self.bytes / 1e6:.1f} MB ({rate:.1f} MB/s)")


def _safe_rel(key: str, prefix: str) -> str | None:
    """The object's path below the mount, or None for keys that would leave it."""
    rel = key[len(prefix):]
    p = PurePosixPath(rel)
    if not rel or rel.endswith("/") or p.is_absolute() or ".." in p.parts:
        return None
    return p.as_posix()


async def download_prefix(m: BucketMount, dest: Path, log: LogFn) -> tuple[int, int]:
    from skyd.storage.s3 import store_for

    st = store_for(m.store)
    try:
        keys = [(k, s) async for k, s in st.list_objects(m.bucket, m.prefix)]
        if not keys:
            raise NotFoundError(f"{m.uri} holds no objects", hint=f"check {m.field}")
        prog = _Progress(f"download {m.uri}", len(keys), log)
        limit = anyio.CapacityLimiter(PARALLEL)

        async def one(key: str) -> None:
            rel = _safe_rel(key, m.prefix)
            if rel is None:
                return
            async with limit:
                prog.add(await st.download(m.bucket, key, dest / rel))

        async with anyio.create_task_group() as tg:
            for k, _ in keys:
                tg.start_soon(one, k)
        return prog.files, prog.bytes
    finally:
        await st.close()


async def copy_to_nodes(prov: Any, handle: Any, mounts: list[BucketMount], staging: Path,
                        log: LogFn) -> None:
    """COPY every COPY mount onto every node (downloaded once into ``staging``, then
    synced), then mount every MOUNT / MOUNT_CACHED one on every node (rclone)."""
    fuse = [m for m in mounts if m.mode != "COPY"]
    mounts = [m for m in mounts if m.mode == "COPY"]
    for i, m in enumerate(mounts):
        d = staging / str(i)
        t0 = time.monotonic()
        files, size = await download_prefix(m, d, log)
        log(f"Downloaded {m.uri}: {files} files, {size / 1e6:.1f} MB"
            f" in {time.monotonic() - t0:.2f}s")
        t1 = time.monotonic()
        async with anyio.create_task_group() as tg:
            for rank in range(len(handle.nodes)):
                tg.start_soon(prov.sync_dir, handle, rank, str(d) + "/", m.dst, [])
        log(f"Copied {m.uri} -> {m.dst} on {len(handle.nodes)} node(s)"
            f" in {time.monotonic() - t1:.2f}s")
        await anyio.to_thread.run_sync(_rmtree, d)
    if fuse:
        from skyd.storage.rclone import mount_all

        await mount_all(prov, handle, fuse, log)


def _rmtree(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)


async def delete_created(store: Any, name: str, log: LogFn) -> None:
    """Delete a bucket skyd created (NotFoundError for any other: never touched)."""
    from skyd.storage.s3 import store_for

    row = await sdb.get(store, name)
    if row is None:
        raise NotFoundError(f"no bucket {name!r} created by skyd",
                            hint="skyd storage ls lists them; others are never deleted")
    st = store_for(row["store"])
    try:
        await st.delete_bucket(name)
    finally:
        await st.close()
    await sdb.forget(store, name)
    log(f"Deleted bucket {name}")


async def on_down(store: Any, cluster: str, log: LogFn) -> None:
    """Delete the ``persistent: false`` buckets created for ``cluster``."""
    for row in await sdb.of_cluster(store, cluster):
        await delete_created(store, row["name"], log)
