"""A `local` node agent started fresh (``python -m skyd.nodeagent``) against one forked from
the daemon's warm helper (skyd/nodeagent/zygote.py), alternating, in one run:

    .venv/bin/python bench/zygote_bench.py [-n 20]

Both go through ``start_agent_detached_blocking`` as the daemon calls it (fresh credentials,
then wait for agent.json). Per start: the CPU seconds it cost (the agent's own to listening,
plus, when forked, what the helper spent on the fork) and the wall seconds until agent.json.
The helper's own start (its imports, once per daemon) is reported on its own line.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from skyd.nodeagent import zygote  # noqa: E402
from skyd.nodeagent.client import start_agent_detached_blocking  # noqa: E402


def _cpu(pid: int) -> float:
    """CPU seconds of all the process's threads, to the nanosecond (schedstat)."""
    return sum(int((t / "schedstat").read_text().split()[0])
               for t in Path(f"/proc/{pid}/task").iterdir()) / 1e9


def one(home: Path, z: zygote.AgentZygote | None) -> tuple[float, float]:
    helper = z.pid if z is not None else None
    before = _cpu(helper) if helper else 0.0
    t0 = time.monotonic()
    info = start_agent_detached_blocking(home, cluster_secret="bench", zygote=z)
    wall = time.monotonic() - t0
    pid = int(info["pid"])
    cpu = _cpu(pid) + ((_cpu(helper) - before) if helper else 0.0)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.01)
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=20)
    a = ap.parse_args()
    z = zygote.AgentZygote()
    got: dict[str, list[tuple[float, float]]] = {"fresh": [], "forked": []}
    with tempfile.TemporaryDirectory(prefix="skyd-zygote-bench-") as d:
        one(Path(d) / "warm-up", z)  # starts the helper
        helper = z.pid
        assert helper is not None, "the helper did not start"
        helper_start = _cpu(helper)
        for i in range(a.n):
            for label, warm in (("fresh", None), ("forked", z)):
                got[label].append(one(Path(d) / f"{label}-{i}", warm))
        z.close()
    print(f"the helper's own start (once per daemon): {helper_start:.3f} CPU s")
    for label in ("fresh", "forked"):
        cpu = statistics.median(c for c, _ in got[label])
        wall = statistics.median(w for _, w in got[label])
        print(f"{label:7s} agent, median of {a.n}: {cpu:.3f} CPU s, {wall:.3f} s to agent.json")
    f = statistics.median(c for c, _ in got["fresh"])
    w = statistics.median(c for c, _ in got["forked"])
    print(f"ratio fresh/forked: CPU {f / w:.1f}x, wall "
          f"{statistics.median(x for _, x in got['fresh']) / statistics.median(x for _, x in got['forked']):.1f}x")


if __name__ == "__main__":
    main()
