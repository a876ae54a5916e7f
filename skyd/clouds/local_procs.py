"""The processes of `local` nodes, as /proc shows them: is a pid alive, which agents run
for a node directory."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["agents_on", "pid_alive"]


def pid_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as dead)."""
    from skyd.nodeagent.executor import pid_alive as running

    return running(pid, None)


def agents_on(node_dir: Path) -> list[int]:
    """Live node-agent processes whose --home is this node dir (found in /proc)."""
    wants = {b"\0--home\0" + str(p).encode() + b"\0" for p in (node_dir, Path(node_dir).resolve())}
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if any(w in cmd + b"\0" for w in wants) and pid_alive(int(name)):
            out.append(int(name))
    return out
