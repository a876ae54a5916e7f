"""Daemon start-up cost: CPU seconds (user + sys) from exec to a socket that accepts, for
two source trees side by side (alternating, so load on a shared machine hits both alike).

    git worktree add /tmp/base <ref>
    .venv/bin/python bench/daemon_start_bench.py --base /tmp/base [-n 10]

Each start gets a fresh SKYD_HOME (no clusters, no jobs): what every autostarted daemon
and every test daemon pays before it answers. The tree under test is this checkout.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def cpu_to_ready(src: Path) -> float:
    """CPU seconds the daemon of source tree `src` used until its socket accepted."""
    with tempfile.TemporaryDirectory(prefix="skyd-start-") as d:
        sock = f"{d}/s.sock"
        env = {**os.environ, "PYTHONPATH": str(src), "SKYD_HOME": f"{d}/home",
               "SKYD_SOCKET": sock, "SKYD_CONFIG_DIR": f"{d}/cfg", "SKYD_SSH_CONFIG": "off",
               "SKYPILOT_GLOBAL_CONFIG": f"{d}/sky.yaml"}
        Path(f"{d}/sky.yaml").write_text("")
        # cwd outside both trees: `-m` puts the cwd first on sys.path
        p = subprocess.Popen([sys.executable, "-m", "skyd.daemon"], env=env, cwd=d,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(sock)
                    break
                except OSError:
                    time.sleep(0.01)
                finally:
                    s.close()
            else:
                raise SystemExit(f"daemon of {src} did not start")
            fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks = os.sysconf("SC_CLK_TCK")
            return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        finally:
            p.terminate()
            p.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, type=Path, help="the other source tree")
    ap.add_argument("-n", type=int, default=10)
    a = ap.parse_args()
    base, new = [], []
    for _ in range(a.n):
        base.append(cpu_to_ready(a.base))
        new.append(cpu_to_ready(HERE))
    mb, mn = statistics.median(base), statistics.median(new)
    print(f"CPU s to a listening daemon, median of {a.n}: base {mb:.2f}  this tree {mn:.2f}"
          f"  ratio base/this {mb / mn:.2f}")


if __name__ == "__main__":
    main()
