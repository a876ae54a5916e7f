"""Local files of a request sent to a daemon on another host (SKYD_HOST=ssh://…).

A task names paths on the machine the user typed it on: its workdir and its local file-mount
sources. When the daemon runs elsewhere, the client uploads them through the same channel
before submitting, content-addressed per file (only blobs the host does not have yet travel),
and adds ``path_map`` to the payload: each local path as the daemon would resolve it -> the
tree the daemon rebuilt from the uploaded blobs. The YAML text itself is sent unchanged.

Stdlib only, plus pyyaml (imported only for a remote daemon).
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from skyd.errors import InvalidSpecError

_VAR = re.compile(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))")
BUCKET_PREFIXES = ("s3://", "gs://", "gcs://", "r2://", "cos://", "oci://", "https://",
                   "http://", "az://", "azure://", "nebius://", "ftp://", "file://")
MAX_UPLOAD_BYTES = 4 << 30  # a task's local files beyond this are a mistake to send over SSH


def _subst(text: str, env: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in env:
            return env[name]
        if m.group(2) is not None:
            return m.group(2)
        return m.group(0)

    return _VAR.sub(one, text)


def _key(path: str, base_dir: str) -> str:
    """The path as the daemon's loader resolves it (skyd.models.storage.resolve_local)."""
    if path.startswith("~") or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(base_dir, path))


def _local(path: str, base_dir: str) -> Path:
    return Path(os.path.expanduser(path) if path.startswith("~")
                else os.path.join(base_dir, path))


def local_paths(payload: dict[str, Any]) -> list[str]:
    """The local paths a request's task names (workdir and local file-mount sources), as
    written (after $VAR substitution)."""
    import yaml

    env = {**os.environ, **{k: str(v) for k, v in (payload.get("env") or {}).items()}}
    out: list[str] = []
    over = payload.get("overrides") or {}
    if isinstance(over.get("workdir"), str):
        out.append(over["workdir"])
    text = payload.get("yaml")
    if not text:
        return out
    try:
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except yaml.YAMLError:
        return out  # the daemon reports the YAML error with its line
    for d in docs:
        wd = d.get("workdir")
        if isinstance(wd, str) and wd.strip():
            out.append(wd)
        for src in (d.get("file_mounts") or {}).values() if isinstance(d.get("file_mounts"), dict) else ():
            if isinstance(src, dict) and "source" in src:
                src = src["source"]
            for s in (src if isinstance(src, list) else [src]):
                if isinstance(s, str) and s.strip() and not s.startswith(BUCKET_PREFIXES):
                    out.append(s)
    return list(dict.fromkeys(_subst(p, env) for p in out))


def _walk(root: Path) -> Iterator[tuple[str, Path]]:
    if root.is_file():
        yield root.name, root
        return
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.is_symlink() or not p.is_file():
                continue  # links and special files are not sent (as rsync -a of a copy would)
            yield str(p.relative_to(root)), p


def _sha(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest(root: Path) -> dict[str, Any]:
    """{"kind": "file"|"dir", "files": [[relpath, sha256, mode]]}."""
    files = [[rel, _sha(p), p.stat().st_mode & 0o777] for rel, p in _walk(root)]
    return {"kind": "file" if root.is_file() else "dir", "files": files}


def upload(client: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """Send the request's local files to the (remote) daemon; the payload with ``path_map``."""
    base = str(payload.get("base_dir") or os.getcwd())
    path_map: dict[str, str] = {}
    for raw in local_paths(payload):
        local = _local(raw, base)
        if not local.exists():
            continue  # the daemon names the missing path with its field
        man = manifest(local)
        blobs = {sha: local / rel if man["kind"] == "dir" else local for rel, sha, _ in man["files"]}
        total = sum(p.stat().st_size for p in blobs.values())
        if total > MAX_UPLOAD_BYTES:
            raise InvalidSpecError(
                f"{raw!r} holds {total >> 20} MiB; too much to send to a remote daemon",
                field="workdir", hint="put large data in a bucket (file_mounts: /data: s3://…)")
        missing = client.post("/v1/uploads/missing", {"blobs": sorted(blobs)})["missing"]
        if missing:
            with _tar(blobs, missing) as body:
                client.put_file("/v1/uploads/blobs", body)
        tree = client.post("/v1/uploads/trees", man)["path"]
        path_map[_key(raw, base)] = tree
    if not path_map:
        return payload
    out = {**payload, "path_map": path_map}
    over = payload.get("overrides")
    if isinstance(over, dict) and isinstance(over.get("workdir"), str):
        # --workdir DIR: the override names the uploaded copy (every place the daemon
        # applies overrides then sees it, not a path of this machine).
        env = {**os.environ, **{k: str(v) for k, v in (payload.get("env") or {}).items()}}
        key = _key(_subst(over["workdir"], env), base)
        if key in path_map:
            out["overrides"] = {**over, "workdir": path_map[key]}
    return out


def _tar(blobs: dict[str, Path], which: list[str]) -> IO[bytes]:
    """The missing blobs as one tar stream (a temp file: never the whole upload in memory)."""
    buf = tempfile.TemporaryFile()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for sha in which:
            p = blobs[sha]
            info = tarfile.TarInfo(sha)
            info.size = p.stat().st_size
            info.mode = 0o600
            with open(p, "rb") as f:
                tf.addfile(info, f)
    buf.seek(0)
    return buf
