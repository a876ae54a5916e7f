"""What this machine offers as `local` nodes: how many sandboxes it can hold, its memory,
its GPUs (the same detection the node agent runs)."""

from __future__ import annotations

import os


def memory_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / (1024 * 1024), 1)
    except OSError:
        pass
    return 0.0


def local_max_nodes() -> int:
    """How many sandboxes this machine can run: each node is a real agent process plus its
    jobs, so at most 8 per CPU and one per 256 MiB of memory (never fewer than 4)."""
    cpus = os.cpu_count() or 1
    mem = memory_gib()
    by_mem = int(mem * 4) if mem > 0 else 8 * cpus
    return max(4, min(8 * cpus, by_mem))


def detect_local_gpus() -> tuple[str | None, int]:
    """(canonical accelerator name, count) of this machine's GPUs, or (None, 0)."""
    try:
        from skyd.nodeagent import gpu
    except ImportError:  # pragma: no cover - agent package missing
        return None, 0
    gpus = gpu.detect()
    if not gpus:
        return None, 0
    name = getattr(gpus[0], "name", None)
    return (str(name) if name else None), len(gpus)
