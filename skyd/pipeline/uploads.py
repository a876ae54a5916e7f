"""Daemon plugin: the local files of a client on another host (skyd.sdk.uploads).

- ``POST /v1/uploads/missing`` {"blobs": [sha256…]} -> {"missing": [...]}: which file
  contents this daemon does not hold yet.
- ``PUT /v1/uploads/blobs`` (a tar stream whose members are named by their sha256) stores
  them, each checked against its name.
- ``POST /v1/uploads/trees`` {"kind": "dir"|"file", "files": [[relpath, sha256, mode]]} ->
  {"path": …}: the tree rebuilt from blobs (copies) under SKYD_HOME/uploads/trees/<id>,
  where <id> is the manifest's hash, so the same files make the same path (a relaunch
  syncs nothing new).

Everything lives under SKYD_HOME/uploads (0700); names and paths from the client are
checked before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

import anyio

from skyd import paths
from skyd.daemon.registry import register_read
from skyd.errors import InvalidSpecError

SHA_RE = re.compile(r"^[0-9a-f]{64}$")
MAX_BLOBS = 200_000  # files in one request's trees
MAX_UPLOAD_BYTES = 4 << 30  # skyd.sdk.uploads.MAX_UPLOAD_BYTES


def root() -> Path:
    d = paths.home() / "uploads"
    for sub in ("blobs", "trees", "tmp"):
        (d / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


def _shas(v: Any) -> list[str]:
    if not isinstance(v, list) or len(v) > MAX_BLOBS:
        raise InvalidSpecError(f"blobs must be a list of at most {MAX_BLOBS} sha256 digests",
                               field="blobs")
    for s in v:
        if not isinstance(s, str) or not SHA_RE.match(s):
            raise InvalidSpecError(f"not a sha256 digest: {str(s)[:80]!r}", field="blobs")
    return v


async def missing(ctx: Any, request: Any) -> Any:
    """Which blobs the daemon lacks."""
    shas = _shas((ctx.body or {}).get("blobs"))
    blobs = root() / "blobs"
    return {"missing": [s for s in shas if not (blobs / s).is_file()]}


def _store_blobs(tar_path: Path) -> int:
    blobs = root() / "blobs"
    n = 0
    with tarfile.open(tar_path, mode="r:") as tf:
        for m in tf:
            if not m.isfile() or not SHA_RE.match(m.name):
                raise InvalidSpecError(f"upload member {m.name[:80]!r} is not a blob",
                                       field="body")
            src = tf.extractfile(m)
            assert src is not None
            fd, tmp = tempfile.mkstemp(dir=root() / "tmp")
            h = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                while chunk := src.read(1 << 20):
                    h.update(chunk)
                    out.write(chunk)
            if h.hexdigest() != m.name:
                os.unlink(tmp)
                raise InvalidSpecError(f"blob {m.name} does not match its content", field="body")
            os.replace(tmp, blobs / m.name)
            n += 1
    return n


async def put_blobs(ctx: Any, request: Any) -> Any:
    """Store uploaded blobs (a tar stream, members named by sha256)."""
    size = request.content_length
    if size is not None and size > MAX_UPLOAD_BYTES:
        raise InvalidSpecError(f"upload of {size >> 20} MiB is over {MAX_UPLOAD_BYTES >> 20} MiB",
                               field="body", hint="put large data in a bucket")
    fd, tmp = tempfile.mkstemp(dir=root() / "tmp", suffix=".tar")
    got = 0
    try:
        with os.fdopen(fd, "wb") as out:
            async for chunk in request.content.iter_chunked(1 << 20):
                got += len(chunk)
                if got > MAX_UPLOAD_BYTES:
                    raise InvalidSpecError("upload too large", field="body",
                                           hint="put large data in a bucket")
                await anyio.to_thread.run_sync(out.write, chunk)
        try:
            n = await anyio.to_thread.run_sync(_store_blobs, Path(tmp))
        except tarfile.TarError as e:
            raise InvalidSpecError(f"upload is not a tar stream: {e}", field="body") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return {"stored": n}


def _rel(rel: Any) -> str:
    if not isinstance(rel, str) or not rel or "\x00" in rel:
        raise InvalidSpecError(f"bad file name {str(rel)[:80]!r}", field="files")
    p = PurePosixPath(rel)
    if p.is_absolute() or any(part in ("", ".", "..") for part in p.parts) or str(p) != rel:
        raise InvalidSpecError(f"file name {rel[:80]!r} leaves its tree", field="files")
    return rel


def _build_tree(man: dict[str, Any]) -> str:
    kind = man.get("kind")
    files = man.get("files")
    if kind not in ("dir", "file") or not isinstance(files, list) or len(files) > MAX_BLOBS:
        raise InvalidSpecError("bad upload manifest", field="files")
    if kind == "file" and len(files) != 1:
        raise InvalidSpecError("a file upload holds exactly one file", field="files")
    entries = []
    for f in files:
        if not isinstance(f, list) or len(f) != 3:
            raise InvalidSpecError("bad upload manifest entry", field="files")
        rel, sha, mode = f
        _shas([sha])
        if not isinstance(mode, int) or not 0 <= mode <= 0o777:
            raise InvalidSpecError("bad file mode", field="files")
        entries.append((_rel(rel), sha, mode))
    r = root()
    tid = hashlib.sha256(json.dumps([kind, entries], sort_keys=True).encode()).hexdigest()
    final = r / "trees" / tid
    if not final.is_dir():
        work = Path(tempfile.mkdtemp(dir=r / "tmp"))
        try:
            for rel, sha, mode in entries:
                blob = r / "blobs" / sha
                if not blob.is_file():
                    raise InvalidSpecError(f"blob {sha} was not uploaded", field="files")
                dst = work / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(blob, dst)  # a copy: a job writing to it never alters a blob
                os.chmod(dst, (mode & 0o755) | 0o600)
            try:
                os.rename(work, final)
            except OSError:
                if not final.is_dir():
                    raise
                shutil.rmtree(work, ignore_errors=True)  # built meanwhile by another request
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return str(final / entries[0][0]) if kind == "file" else str(final)


async def trees(ctx: Any, request: Any) -> Any:
    """Rebuild a client's directory (or file) from uploaded blobs; its path here."""
    return {"path": await anyio.to_thread.run_sync(_build_tree, ctx.body or {})}


register_read("POST", "/v1/uploads/missing", missing, summary="Blobs the daemon lacks")
register_read("PUT", "/v1/uploads/blobs", put_blobs, raw_body=True, summary="Upload blobs (tar)")
register_read("POST", "/v1/uploads/trees", trees, summary="Rebuild an uploaded tree")
