"""What skyd owns is private; what it does not own, it does not touch. Stdlib only: the CLI
imports this on its fast path (auto-start creates SKYD_HOME).

- :func:`private_mkdir` creates each missing component of a directory 0700 and returns the
  ones it created: only those may be tightened later by the caller.
- :func:`tighten_home` brings an existing install to the same modes at daemon start:
  SKYD_HOME and skyd's own directories 0700, its files without group/other bits. Below a
  local node's directory (the job's sandbox: workdir, home, root) nothing is changed; the
  node directory's own 0700 already keeps other users out.
- :data:`PRIVATE_UMASK` is set at daemon and agent start, so every file is private from its
  first write (SQLite's database, WAL and journal files included).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077


def private_mkdir(path: Path) -> list[Path]:
    """``mkdir -p path`` where every directory created is 0700 (whatever the umask). Returns
    the directories created by this call, outermost first; existing ones are left as they are."""
    path = Path(os.path.abspath(path))
    missing: list[Path] = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    created: list[Path] = []
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue  # another process made it meanwhile: not ours to tighten
        os.chmod(d, 0o700)  # mkdir's mode is masked by the umask; the umask may be wider
        created.append(d)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a directory")
    return created


def open_private(path: Path, flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    """An fd on ``path``, created 0600 (an existing file keeps its owner; its group/other
    bits are removed when we own it)."""
    fd = os.open(path, flags | os.O_CLOEXEC, 0o600)
    with contextlib.suppress(OSError):
        st = os.fstat(fd)
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~0o077)
    return fd


def _strip(path: Path, *, is_dir: bool, uid: int) -> bool:
    """Remove group/other bits of one entry we own (never following a symlink)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode) or st.st_uid != uid:
        return False
    if is_dir != stat.S_ISDIR(st.st_mode):
        return False
    mode = stat.S_IMODE(st.st_mode)
    want = 0o700 if is_dir else mode & ~0o077
    if mode == want:
        return False
    with contextlib.suppress(OSError):
        os.chmod(path, want)
        return True
    return False


def tighten_home(home: Path) -> int:
    """Give an existing SKYD_HOME the modes a new one gets. Returns how many entries changed.

    Touches only: ``home`` itself, its direct entries, the trees of skyd's own directories
    under it (logs, run, secrets, keys, ssh, ...: everything but ``local``), and in
    ``local/`` each cluster directory, each node directory and the node directory's own
    files (agent.json, agent.log, jobs.db, token): never what a job keeps in its sandbox."""
    uid = os.getuid()
    if not home.is_dir() or home.is_symlink():
        return 0
    changed = int(_strip(home, is_dir=True, uid=uid))
    for entry in _scan(home):
        if entry.is_symlink():
            continue
        p = Path(entry.path)
        if entry.is_file():
            changed += _strip(p, is_dir=False, uid=uid)
            continue
        if not entry.is_dir():
            continue
        changed += _strip(p, is_dir=True, uid=uid)
        if entry.name == "local":
            changed += _tighten_sandboxes(p, uid)
            continue
        changed += _tighten_tree(p, uid)
    return changed


def _tighten_tree(top: Path, uid: int) -> int:
    """Every entry below ``top``; never into a symlink or another filesystem (a mount)."""
    changed = 0
    for root, dirs, files in os.walk(top):
        r = Path(root)
        dirs[:] = [d for d in dirs if not os.path.ismount(r / d)]
        changed += sum(_strip(r / d, is_dir=True, uid=uid) for d in dirs)
        changed += sum(_strip(r / f, is_dir=False, uid=uid) for f in files)
    return changed


def _tighten_sandboxes(local: Path, uid: int) -> int:
    changed = 0
    for cluster in _scan(local):
        if cluster.is_symlink() or not cluster.is_dir():
            continue
        changed += _strip(Path(cluster.path), is_dir=True, uid=uid)
        for node in _scan(Path(cluster.path)):
            if node.is_symlink() or not node.is_dir():
                continue
            changed += _strip(Path(node.path), is_dir=True, uid=uid)
            for f in _scan(Path(node.path)):
                if f.is_file(follow_symlinks=False):
                    changed += _strip(Path(f.path), is_dir=False, uid=uid)
            jobs = Path(node.path) / "jobs"
            if jobs.is_dir() and not jobs.is_symlink() and not os.path.ismount(jobs):
                changed += _strip(jobs, is_dir=True, uid=uid) + _tighten_tree(jobs, uid)
    return changed


def _scan(d: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(d) as it:
            return list(it)
    except OSError:
        return []


def unsafe_dir_reason(d: Path) -> str | None:
    """Why a directory we did not create is unsafe to hold our socket, else None: another
    user could replace what we put there (writable by group/others without the sticky bit,
    or owned by another non-root user)."""
    st = d.stat()
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in (os.getuid(), 0):
        return f"{d} belongs to another user (uid {st.st_uid})"
    if mode & 0o022 and not mode & stat.S_ISVTX:
        return f"{d} is writable by other users (mode {mode:04o}) and not sticky"
    return None
