"""Workdir / file-mount sync: local copy, rsync over SSH, SFTP; .gitignore-style excludes.

- ``load_excludes(src)``: the patterns of ``src/.skydignore`` and ``src/.skyignore`` if either
  exists, else of ``src/.gitignore`` (SkyPilot's rule: an ignore file of its own replaces
  .gitignore). Top-level files only; nested .gitignore files are not read.
- ``sync_local_dir(src, dst, excludes)``: rsync when installed, else a Python copy (in a
  thread) with the same pattern semantics. Only changed files (size or whole-second mtime
  differ) are copied; nothing is deleted at the destination.
- ``sync_to_remote(transport, src, dst, excludes)``: rsync over the same SSH settings when
  rsync exists on both ends, else SFTP; connection drops are retried (files already there
  are skipped on the retry).

Every function returns ``SyncStats(files, bytes)``: files and bytes actually transferred.
Nothing here imports asyncssh; the SSH functions take the transport as an argument.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from skyd.transports.ssh import SSHTransport

IGNORE_FILES_OWN = (".skydignore", ".skyignore")


@dataclass
class SyncStats:
    files: int = 0
    bytes: int = 0
    method: str = ""


# -- ignore patterns (a gitignore subset: !, trailing /, leading /, *, ?, **, [..]) -----------


def load_excludes(src_dir: str | Path) -> list[str]:
    src = Path(src_dir)
    if not src.is_dir():
        return []
    own = [src / n for n in IGNORE_FILES_OWN if (src / n).is_file()]
    files = own or ([src / ".gitignore"] if (src / ".gitignore").is_file() else [])
    out: list[str] = []
    for f in files:
        for line in f.read_text(errors="replace").splitlines():
            line = line.rstrip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("\\#"):
                line = line[1:]
            out.append(line)
    return out


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    anchored: bool


def _glob_to_regex(pat: str) -> str:
    i, out = 0, []
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("/**", i) and i + 3 == len(pat):
            out.append("/.*")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pat.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
                i += 1
            else:
                body = pat[i + 1 : j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _parse(pattern: str) -> _Rule | None:
    p = pattern.strip()
    negate = p.startswith("!")
    if negate:
        p = p[1:]
    dir_only = p.endswith("/")
    p = p.rstrip("/")
    if not p:
        return None
    anchored = "/" in p
    p = p.lstrip("/")
    return _Rule(re.compile(_glob_to_regex(p) + r"\Z"), negate, dir_only, anchored)


class IgnoreMatcher:
    """Last matching pattern wins; ``!pat`` re-includes. Paths are relative, '/'-separated."""

    def __init__(self, patterns: list[str]) -> None:
        self.rules = [r for r in (_parse(p) for p in patterns) if r is not None]

    def ignored(self, rel: str, is_dir: bool) -> bool:
        name = rel.rsplit("/", 1)[-1]
        result = False
        for r in self.rules:
            if r.dir_only and not is_dir:
                continue
            if r.regex.match(rel if r.anchored else name):
                result = not r.negate
        return result


def rsync_filter_args(patterns: list[str]) -> list[str]:
    """The same patterns as rsync --include/--exclude (first match wins there, so reversed)."""
    args: list[str] = []
    for pattern in reversed(patterns):
        p = pattern.strip()
        negate = p.startswith("!")
        if negate:
            p = p[1:]
        body = p.rstrip("/")
        if not body:
            continue
        if "/" in body and not p.startswith("/"):
            p = "/" + p  # gitignore anchors patterns with an inner slash; rsync would not
        args.append(("--include=" if negate else "--exclude=") + p)
    return args


# -- walking ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalFile:
    rel: str
    path: str
    size: int
    mtime: int


def walk_files(src: Path, patterns: list[str]) -> tuple[list[str], list[LocalFile]]:
    """(directories, files) under ``src`` that are not excluded (blocking: call in a thread)."""
    m = IgnoreMatcher(patterns)
    dirs: list[str] = []
    files: list[LocalFile] = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        base = src / rel_dir if rel_dir else src
        try:
            entries = list(os.scandir(base))
        except OSError:
            continue
        for e in entries:
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            is_dir = e.is_dir(follow_symlinks=False)
            if m.ignored(rel, is_dir):
                continue
            if is_dir:
                dirs.append(rel)
                stack.append(rel)
                continue
            try:
                st = e.stat(follow_symlinks=True)
            except OSError:
                continue  # dangling symlink
            if not os.path.isfile(e.path):
                continue
            files.append(LocalFile(rel, e.path, st.st_size, int(st.st_mtime)))
    return dirs, files


# -- local --------------------------------------------------------------------------------


_RE_FILES = re.compile(r"Number of regular files transferred:\s*([\d,.]+)")
_RE_BYTES = re.compile(r"Total transferred file size:\s*([\d,.]+)")


def parse_rsync_stats(text: str) -> SyncStats:
    def num(rx: re.Pattern[str]) -> int:
        mo = rx.search(text)
        return int(re.sub(r"[,.]", "", mo.group(1))) if mo else 0

    return SyncStats(num(_RE_FILES), num(_RE_BYTES), "rsync")


def _python_copy(src: Path, dst: Path, patterns: list[str]) -> SyncStats:
    stats = SyncStats(method="copy")
    if src.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        if _changed(src, dst):
            shutil.copy2(src, dst)
            stats.files, stats.bytes = 1, src.stat().st_size
        return stats
    dirs, files = walk_files(src, patterns)
    dst.mkdir(parents=True, exist_ok=True)
    for d in sorted(dirs):
        (dst / d).mkdir(parents=True, exist_ok=True)
    for f in files:
        target = dst / f.rel
        if _changed(Path(f.path), target):
            shutil.copy2(f.path, target)
            stats.files += 1
            stats.bytes += f.size
    return stats


def _changed(a: Path, b: Path) -> bool:
    """Size or mtime differ, to the nanosecond: a same-size edit within the second of the
    last sync (two quick launches) is a change. copy2 keeps the nanoseconds."""
    try:
        sa, sb = a.stat(), b.stat()
    except OSError:
        return True
    return sa.st_size != sb.st_size or sa.st_mtime_ns != sb.st_mtime_ns


_rsync_ns: list[str] | None = None


async def _rsync_time_args() -> list[str]:
    """``--modify-window=-1`` (compare mtimes to the nanosecond; rsync >= 3.1.3) where the
    installed rsync has it: its quick check otherwise takes whole seconds. Asked once."""
    global _rsync_ns
    if _rsync_ns is None:
        res = await anyio.run_process(["rsync", "--version"], check=False)
        mo = re.search(rb"version\s+(\d+)\.(\d+)\.(\d+)", res.stdout)
        ok = mo is not None and tuple(int(x) for x in mo.groups()) >= (3, 1, 3)
        _rsync_ns = ["--modify-window=-1"] if ok else []
    return _rsync_ns


async def sync_local_dir(
    src: str | Path, dst: str | Path, excludes: list[str] | None = None, *, use_rsync: bool | None = None
) -> SyncStats:
    """Copy ``src`` (directory or file) to ``dst`` on this machine. ``excludes=None`` reads
    them from ``src`` (load_excludes)."""
    src, dst = Path(src), Path(dst)
    patterns = load_excludes(src) if excludes is None else list(excludes)
    if use_rsync is None:
        use_rsync = shutil.which("rsync") is not None
    if not use_rsync:
        return await anyio.to_thread.run_sync(_python_copy, src, dst, patterns)
    base = ["rsync", "-a", "--stats", *await _rsync_time_args()]
    if src.is_dir():
        dst.mkdir(parents=True, exist_ok=True)
        argv = [*base, *rsync_filter_args(patterns), f"{src}/", f"{dst}/"]
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        argv = [*base, str(src), str(dst)]
    res = await anyio.run_process(argv, check=False)
    if res.returncode != 0:
        from skyd.errors import SkydError

        raise SkydError(
            f"rsync {src} -> {dst} failed ({res.returncode}): "
            + res.stderr.decode(errors="replace").strip()[-500:]
        )
    return parse_rsync_stats(res.stdout.decode(errors="replace"))


# -- remote (over an SSHTransport) -------------------------------------------------------

# Python >= 3.8 on the node: create dirs (JSON list on stdin), then list files as JSON.
_REMOTE_LIST = r"""
import json, os, sys
root = sys.argv[1]
for d in json.loads(sys.stdin.read() or "[]"):
    os.makedirs(os.path.join(root, d), exist_ok=True)
out = {}
for dp, dns, fns in os.walk(root):
    for fn in fns:
        p = os.path.join(dp, fn)
        try:
            st = os.stat(p)
        except OSError:
            continue
        out[os.path.relpath(p, root)] = [st.st_size, int(st.st_mtime)]
sys.stdout.write(json.dumps(out))
"""

RSYNC_RETRY_CODES = {10, 11, 12, 30, 35, 255}


async def sync_to_remote(
    transport: SSHTransport,
    src: str | Path,
    dst: str,
    excludes: list[str] | None = None,
    *,
    method: str = "auto",
    attempts: int = 4,
    parallel: int = 32,
) -> SyncStats:
    """Copy local ``src`` (dir or file) to absolute ``dst`` on the transport's host.

    ``method``: "auto" (rsync when both ends have it), "rsync" or "sftp"."""
    import shlex

    src = Path(src)
    patterns = load_excludes(src) if excludes is None else list(excludes)
    mk = dst if src.is_dir() else os.path.dirname(dst) or "/"
    probe = await transport.run(
        f"mkdir -p {shlex.quote(mk)} && (command -v rsync >/dev/null && echo rsync || true)",
        idempotent=True,
    )
    if probe.exit_status != 0:
        from skyd.errors import SkydError

        raise SkydError(f"{transport.target}: cannot create {dst}: {probe.stderr.strip()}")
    if method == "auto":
        have = "rsync" in probe.stdout and shutil.which("rsync") is not None
        method = "rsync" if have else "sftp"
    total = SyncStats(method=method)
    delay = 0.2
    for attempt in range(attempts):
        try:
            if method == "rsync":
                stats = await _rsync_remote(transport, src, dst, patterns)
            else:
                stats = await _sftp_sync(transport, src, dst, patterns, parallel)
            total.files += stats.files
            total.bytes += stats.bytes
            return total
        except _Retry as e:
            total.files += e.done.files
            total.bytes += e.done.bytes
            if attempt + 1 >= attempts:
                raise e.cause from None
        await anyio.sleep(delay)
        delay = min(delay * 2, 5.0)
    return total


class _Retry(Exception):
    def __init__(self, cause: BaseException, done: SyncStats) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.done = done


async def _rsync_remote(
    transport: SSHTransport, src: Path, dst: str, patterns: list[str]
) -> SyncStats:
    import shlex

    from skyd.errors import SkydError

    t = transport.target
    ssh = shlex.join(t.ssh_command())
    if src.is_dir():
        argv = ["rsync", "-a", "--stats", "-e", ssh, *rsync_filter_args(patterns), f"{src}/", f"{t.host}:{dst}/"]
    else:
        argv = ["rsync", "-a", "--stats", "-e", ssh, str(src), f"{t.host}:{dst}"]
    res = await anyio.run_process(argv, check=False)
    if res.returncode == 0:
        return parse_rsync_stats(res.stdout.decode(errors="replace"))
    err = SkydError(
        f"rsync to {t}:{dst} failed (exit {res.returncode}): "
        + res.stderr.decode(errors="replace").strip()[-500:],
        hint="check that the host is reachable with the pool's key",
    )
    if res.returncode in RSYNC_RETRY_CODES:
        raise _Retry(err, parse_rsync_stats(res.stdout.decode(errors="replace")))
    raise err


async def _sftp_sync(
    transport: SSHTransport, src: Path, dst: str, patterns: list[str], parallel: int
) -> SyncStats:
    from skyd.transports.ssh import is_connection_error

    done = SyncStats(method="sftp")
    try:
        if src.is_file():
            sftp = await transport.sftp()
            try:
                st = await sftp.stat(dst)
                rst = (st.size, int(st.mtime or 0))
            except Exception:  # noqa: BLE001 - missing remote file
                rst = None
            lst = src.stat()
            if rst != (lst.st_size, int(lst.st_mtime)):
                await sftp.put(str(src), dst, preserve=True)
                done.files, done.bytes = 1, lst.st_size
            return done
        dirs, files = await anyio.to_thread.run_sync(walk_files, src, patterns)
        res = await transport.run(
            ["python3", "-c", _REMOTE_LIST, dst], input=json.dumps(sorted(dirs)), idempotent=True
        )
        remote: dict[str, list[int]] = {}
        sftp = await transport.sftp()
        if res.exit_status == 0:
            remote = json.loads(res.stdout or "{}")
        else:  # no python3 on the node: create dirs over SFTP, send everything
            for d in sorted(dirs):
                await sftp.makedirs(f"{dst}/{d}", exist_ok=True)
        todo = [f for f in files if remote.get(f.rel) != [f.size, f.mtime]]
        sem = anyio.Semaphore(parallel)

        lost: list[BaseException] = []

        async def put(f: LocalFile) -> None:
            # Connection errors are collected, not raised: cancelling sibling puts would
            # orphan asyncssh's internal write tasks. Every put fails fast once it is lost.
            async with sem:
                if lost:
                    return
                try:
                    await _sftp_put(sftp, f, f"{dst}/{f.rel}")
                except Exception as e:
                    if not is_connection_error(e):
                        raise
                    lost.append(e)
                    return
                done.files += 1
                done.bytes += f.size

        async with anyio.create_task_group() as tg:
            for f in todo:
                tg.start_soon(put, f)
        if lost:
            raise lost[0]
        return done
    except BaseException as e:  # noqa: BLE001 - classify, re-raise
        cause = _unwrap(e)
        if cause is not None and is_connection_error(cause):
            transport.reset()
            raise _Retry(cause, done) from None
        raise


SMALL_FILE = 4 << 20


def _read_small(path: str) -> tuple[bytes, int]:
    with open(path, "rb") as fh:
        return fh.read(), os.fstat(fh.fileno()).st_mode & 0o7777


async def _sftp_put(sftp: Any, f: LocalFile, remote: str) -> None:
    """Small files in one write (asyncssh's parallel put leaks tasks when the connection
    drops); big ones with sftp.put. Times and mode are preserved, as rsync -a does."""
    if f.size > SMALL_FILE:
        await sftp.put(f.path, remote, preserve=True)
        return
    import asyncssh

    data, mode = await anyio.to_thread.run_sync(_read_small, f.path)
    async with sftp.open(remote, "wb") as fh:
        if data:
            await fh.write(data)
        await fh.setstat(asyncssh.SFTPAttrs(permissions=mode, atime=f.mtime, mtime=f.mtime))


def _unwrap(e: BaseException) -> BaseException | None:
    """The first leaf of an exception group (task group errors), or e itself."""
    while isinstance(e, BaseExceptionGroup):
        if not e.exceptions:
            return None
        e = e.exceptions[0]
    return e
