"""Machine-wide names the real-part fakes use (Unix users and groups, fixed ports), one set
per xdist worker: modules on different workers never share a user another module wipes
and pkills, or a Slurm controller's ports, so they may run at the same time."""

from __future__ import annotations

import os


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
