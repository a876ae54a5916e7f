"""Machine-wide names the real-part fakes use (Unix users and groups, fixed ports), one set
per xdist worker: modules on different workers never share a user another module wipes
and pkills, or a Slurm controller's ports, so they may run at the same time."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path


def worker_index() -> int:
    """0 for a serial run or worker gw0, N for gwN."""
    w = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(w[2:]) if w.startswith("gw") and w[2:].isdigit() else 0


def per_worker(name: str) -> str:
    """A user or group name of this worker: ``name`` itself in a serial run, else
    ``name-gwN`` (well inside useradd's 32 characters)."""
    w = os.environ.get("PYTEST_XDIST_WORKER", "")
    return f"{name}-{w}" if w else name


def port_base(first: int, span: int = 10) -> int:
    """The first of ``span`` fixed ports this worker may use, counting from ``first``."""
    return first + span * worker_index()


def fresh_home(home: Path, keep: Iterable[str] = ()) -> None:
    """Make a test user's home what ``useradd -m`` made it (its /etc/skel files), keeping
    the paths in ``keep`` (relative, e.g. a container runtime's image store). These users
    outlive a run: what an earlier run's jobs wrote there (agent dirs, a file a job waits
    for, a synced tree) would otherwise be found by this run's, and could hide its failure."""
    skel = set(os.listdir("/etc/skel")) if os.path.isdir("/etc/skel") else set()
    _prune(home, skel | set(keep))


def _prune(d: Path, keep: set[str]) -> None:
    for entry in d.iterdir():
        if entry.name in keep:
            continue
        inner = {k.split("/", 1)[1] for k in keep if k.startswith(entry.name + "/")}
        if entry.is_dir() and not entry.is_symlink():
            if inner:
                _prune(entry, inner)
            else:
                shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
