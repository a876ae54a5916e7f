"""A `local` node's mount namespace (bubblewrap): the paths a task names, where it names them.

On a VM, ``file_mounts: {/data: ...}`` puts the data at ``/data``. A `local` node is a
sandbox directory, so skyd copies (or rclone-mounts) it to ``<node>/root/data``; each job
phase then runs under ``bwrap`` (Debian's ``bubblewrap``), in a mount namespace of its own in
which every such destination is bound at the exact path the YAML names, while the rest of
the host filesystem is what it is today (bound read-write: same files, same devices, same
/proc). Nothing is created on the host for it:

- bwrap's new root is a tmpfs; every top-level entry of the host's ``/`` is bound back
  (symlinks recreated), so a mountpoint for ``/data`` is made in that tmpfs, not on disk;
- a destination below an existing host directory that lacks it (``/mnt/x`` where ``/mnt``
  exists) "mirrors" that directory: a tmpfs over it in the namespace, with each of the
  host's entries bound back, then the destination bound there (the entries are those of
  when the arguments were last written -- at each launch on the node and each new mount --
  and one gone since is skipped);
- a destination that exists on the host (a file or directory) is bound over.

Why per job, not one namespace around the agent: a job sees the binds of the moment it
starts (a later ``launch`` on the cluster may add mounts), the agent keeps running
unchanged (wherever its Python lives), and nothing outlives the job: the namespace goes
with its last process, so a ``kill -9`` of the agent or daemon leaves no namespace or
mount behind (bucket FUSE mounts live on the host, in the sandbox, and are unmounted at
down as before). No user, pid or network namespace is made (``bwrap`` adds a user
namespace by itself when not run as root): ranks share the host's network and reach each
other at their node addresses (skyd.clouds.local_net).

Files, under the node's ``.skyd/``: ``ns-binds.json`` (destination -> source, kept by the
provisioner), ``ns.args`` (bwrap's arguments, NUL-separated, rebuilt when the binds change)
and ``nsexec`` (the job wrapper the agent runs each phase under: ``nsexec bash SCRIPT``).
Where the namespace cannot be made (no bwrap, no user namespaces), ``nsexec`` runs the
phase as today after one warning line in the job's log naming each destination it will not
find, and where that data is instead.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
from pathlib import Path

from skyd import settings

BINDS = "ns-binds.json"
ARGS = "ns.args"
WRAPPER = "nsexec"
ENV = settings.JOB_WRAPPER.name  # the agent runs each job phase as `$SKYD_JOB_WRAPPER bash SCRIPT`

_probe: tuple[bool, str] | None = None


def bwrap_path() -> str | None:
    """bwrap on PATH, or ``$SKYD_BWRAP`` (a path; ``off`` runs jobs without a namespace)."""
    env = settings.BWRAP.get()
    if env:
        return None if env == "off" else (env if os.access(env, os.X_OK) else None)
    return shutil.which("bwrap")


def _entry_args(path: str) -> list[str]:
    """Put the host's ``path`` back at the same place in the namespace."""
    if os.path.islink(path):
        return ["--symlink", os.readlink(path), path]
    if not os.path.lexists(path):
        return []
    # -try: an entry gone since the arguments were written (a temp dir) is skipped
    return ["--dev-bind-try", path, path]


def _children(d: str) -> list[str]:
    try:
        return sorted(os.path.join(d, e) for e in os.listdir(d))
    except OSError:
        return []


def _norm(dst: str) -> str:
    return os.path.normpath("/" + dst.lstrip("/"))


def _resolve(dst: str) -> str:
    """``dst`` with its existing ancestors' symlinks resolved (``/var/run/x`` -> ``/run/x``),
    so a mirror or bind lands where the host's path really leads."""
    parts = Path(dst).parts[1:]
    for i in range(len(parts), 0, -1):
        head = os.path.join("/", *parts[:i])
        if os.path.lexists(head):
            if os.path.exists(head):
                return os.path.join(os.path.realpath(head), *parts[i:])
            return dst  # a dangling symlink: leave it to bwrap
    return dst


def _existing_parent(dst: str) -> str:
    p = os.path.dirname(dst)
    while p != "/" and not os.path.isdir(p):
        p = os.path.dirname(p)
    return p


def build_args(binds: dict[str, str]) -> list[str]:
    """bwrap arguments (before ``--``) for a namespace with ``binds`` (destination in the
    namespace -> source on the host) over the host's filesystem. Nested destinations keep
    only the outermost one (the source already holds what is under it)."""
    given = {_norm(d): str(s) for d, s in binds.items()}
    dests: dict[str, str] = {}
    for dst in sorted(given, key=lambda d: (d.count("/"), d)):
        if dst != "/" and not any(dst.startswith(k + "/") for k in dests):
            dests[dst] = given[dst]
    resolved = {_resolve(d): s for d, s in dests.items()}
    mirrors = {"/"}
    for dst in resolved:
        if not os.path.lexists(dst):
            mirrors.add(_existing_parent(dst))
    args: list[str] = []
    for m in sorted(mirrors, key=lambda p: (p.count("/") if p != "/" else 0, p)):
        if m != "/":
            mode = "%o" % (os.stat(m).st_mode & 0o7777)
            args += ["--perms", mode, "--tmpfs", m]
        for child in _children(m):
            if child in mirrors:
                # a mirror inside a mirror: its tmpfs needs a mountpoint first
                args += ["--dir", child]
                continue
            args += _entry_args(child)
    for dst, src in sorted(resolved.items(), key=lambda kv: (kv[0].count("/"), kv[0])):
        args += ["--dev-bind", src, dst]
    return args


def probe() -> tuple[bool, str]:
    """(usable, why not): can a namespace of this shape be made here? Cached per process."""
    global _probe
    if _probe is not None:
        return _probe
    exe = bwrap_path()
    if exe is None:
        _probe = (False, "disabled by SKYD_BWRAP=off" if settings.BWRAP.get() == "off"
                  else "bubblewrap (bwrap) is not installed (apt-get install bubblewrap)")
        return _probe
    try:
        r = subprocess.run([exe, *build_args({}), "--", "true"], capture_output=True, timeout=20,
                           check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        _probe = (False, f"bwrap did not run: {e}")
        return _probe
    if r.returncode != 0:
        why = r.stderr.decode(errors="replace").strip().splitlines()
        _probe = (False, "bwrap cannot make a mount namespace here"
                  + (f" ({why[-1]})" if why else "") + "; user namespaces may be disabled")
    else:
        _probe = (True, "")
    return _probe


def _skyd_dir(node_dir: str | Path) -> Path:
    return Path(node_dir) / ".skyd"


def load_binds(node_dir: str | Path) -> dict[str, str]:
    try:
        data = json.loads((_skyd_dir(node_dir) / BINDS).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _atomic(path: Path, data: bytes, mode: int) -> None:
    # a name of its own: two writers at once (threads of one daemon) never share it
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def write(node_dir: str | Path, binds: dict[str, str] | None = None) -> Path:
    """(Re)write the node's bind list (when given), bwrap arguments and job wrapper;
    returns the wrapper's path. Blocking: call from a worker thread in the daemon."""
    d = _skyd_dir(node_dir)
    d.mkdir(parents=True, exist_ok=True)
    if binds is not None:
        _atomic(d / BINDS, json.dumps(binds, indent=1, sort_keys=True).encode(), 0o600)
    binds = load_binds(node_dir)
    ok, why = probe()
    exe = bwrap_path()
    wrapper = d / WRAPPER
    if ok and exe:
        # A destination that holds the node itself (`/tmp` when SKYD_HOME is under it) would
        # hide the job's own script and home: that one stays the host's, with a warning.
        real = os.path.realpath(node_dir)
        hidden = {k: v for k, v in binds.items()
                  if real == _norm(k) or real.startswith(_norm(k).rstrip("/") + "/")}
        argv = build_args({k: v for k, v in binds.items() if k not in hidden})
        _atomic(d / ARGS, b"".join(a.encode() + b"\0" for a in argv), 0o600)
        lines = ["#!/bin/sh", "# skyd: run a job phase in this node's mount namespace (bubblewrap)"]
        for dst, src in sorted(hidden.items()):
            msg = (f"skyd: warning: {dst} holds this node's own directory on this machine, so the"
                   f" job sees the host's {dst}; the file mount is at {src}")
            lines.append(f"printf '%s\\n' {shlex.quote(msg)} >&2")
        lines.append(f"exec {shlex.quote(exe)} --args 3 -- \"$@\" 3< {shlex.quote(str(d / ARGS))}")
        script = "\n".join(lines) + "\n"
    else:
        (d / ARGS).unlink(missing_ok=True)
        lines = ["#!/bin/sh", "# skyd: no mount namespace here; the job runs as is"]
        if binds:
            where = ", ".join(f"{dst} (at {src})" for dst, src in sorted(binds.items()))
            msg = (f"skyd: warning: no mount namespace on this machine ({why}): this job will not"
                   f" find {where}")
            lines.append(f"printf '%s\\n' {shlex.quote(msg)} >&2")
        lines.append('exec "$@"')
        script = "\n".join(lines) + "\n"
    _atomic(wrapper, script.encode(), 0o700)
    return wrapper


def add_bind(node_dir: str | Path, dst: str, src: str | Path) -> None:
    """Record that ``dst`` (absolute, as the task names it) is ``src`` on the host."""
    binds = load_binds(node_dir)
    key = _norm(dst)
    if binds.get(key) == str(src) and (_skyd_dir(node_dir) / WRAPPER).exists():
        return
    binds[key] = str(src)
    write(node_dir, binds)


def shell_argv(node_dir: str | Path, command: list[str]) -> list[str]:
    """``command`` run in the node's namespace (as its jobs are)."""
    wrapper = _skyd_dir(node_dir) / WRAPPER
    return [str(wrapper), *command] if wrapper.exists() else list(command)
