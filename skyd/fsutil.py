"""Confined filesystem operations: the one place skyd deletes a tree, or joins a user path
under a directory it owns. Stdlib only, at the bottom of the layering.

Every recursive delete -- sandboxes on `local`, node directories on SSH hosts (the same
code runs there: :data:`REMOTE_SRC` is pasted into the remote scripts), temporary
directories -- goes through :func:`safe_rmtree`, which resolves the path and refuses
anything that is not strictly inside the root it belongs to (the root itself included).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from skyd.errors import InvalidSpecError

# Python >= 3.8 and stdlib only: this text also runs on pool hosts (skyd.transports.agent_scripts).
REMOTE_SRC = r'''
def confined_target(path, root):
    """The resolved path of ``path`` if it lies strictly inside ``root``, else ValueError.
    The last component is not resolved: a symlink there is the thing itself, not its target."""
    import os
    root_r = os.path.realpath(os.path.abspath(root))
    p = os.path.abspath(path)
    name = os.path.basename(p)
    if name in ("", ".", "..") or "\0" in p:
        raise ValueError("refusing %r: not a plain file or directory name" % (path,))
    target = os.path.join(os.path.realpath(os.path.dirname(p)), name)
    if target == root_r or os.path.commonpath([root_r, target]) != root_r:
        raise ValueError("refusing %r: it is not inside %s" % (path, root_r))
    return target


def safe_rmtree(path, root, ignore_errors=True):
    """Remove ``path`` (a tree, a file or a symlink) only if it is strictly inside ``root``.
    True if something was removed, False if nothing was there; ValueError if refused."""
    import os, shutil
    target = confined_target(path, root)
    try:
        if os.path.islink(target) or os.path.isfile(target):
            os.unlink(target)
            return True
        if not os.path.isdir(target):
            return False
    except OSError:
        if ignore_errors:
            return False
        raise
    shutil.rmtree(target, ignore_errors=ignore_errors)
    return True
'''

_NS: dict[str, Any] = {}
exec(compile(REMOTE_SRC, "skyd.fsutil.REMOTE_SRC", "exec"), _NS)  # noqa: S102 - our own text


class UnsafePathError(InvalidSpecError):
    """A path that would leave the directory it belongs to (exit 2)."""


def confined_target(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> Path:
    """``path`` resolved, if strictly inside ``root`` (else UnsafePathError)."""
    try:
        return Path(_NS["confined_target"](os.fspath(path), os.fspath(root)))
    except ValueError as e:
        raise UnsafePathError(str(e)) from None


def safe_rmtree(path: str | os.PathLike[str], root: str | os.PathLike[str], *,
                ignore_errors: bool = True) -> bool:
    """Delete ``path`` recursively if it lies strictly inside ``root``; UnsafePathError if
    not (nothing is touched). Blocking: call it from a worker thread on the event loop."""
    try:
        return bool(_NS["safe_rmtree"](os.fspath(path), os.fspath(root), ignore_errors))
    except ValueError as e:
        raise UnsafePathError(str(e)) from None


def child_dir(root: Path, name: str) -> Path:
    """``root / name`` where ``name`` must be one plain path component (no '/', not '.' or
    '..', not empty, fits a file name); UnsafePathError otherwise."""
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name
            or "\0" in name or len(name.encode("utf-8", "surrogateescape")) > 255):
        raise UnsafePathError(f"{name!r} is not a plain directory name",
                              hint="it would put files outside their directory")
    return root / name


def join_confined(root: str | os.PathLike[str], rel: str) -> Path:
    """``root / rel`` for a relative path from a user (a file-mount destination): '..' or a
    symlink may not lead outside ``root``. The result may be ``root`` itself."""
    base = os.path.realpath(os.fspath(root))
    joined = os.path.realpath(os.path.join(base, rel.lstrip("/")))
    if joined != base and os.path.commonpath([base, joined]) != base:
        raise UnsafePathError(f"{rel!r} leads outside {base}",
                              hint="a destination may not climb out with '..' or a symlink")
    return Path(joined)


def check_dest(dst: str) -> str:
    """A destination path on a node (file mounts): no '..' component, no NUL."""
    if not isinstance(dst, str) or "\0" in dst or ".." in dst.replace("\\", "/").split("/"):
        raise UnsafePathError(
            f"destination {dst!r} climbs out with '..'",
            field="file_mounts",
            hint="write the path on the node without '..', e.g. /data/x or ~/x",
        )
    return dst
