"""Daemon start-up cost: CPU seconds (user + sys) from exec to a socket that accepts, for
two source trees side by side (alternating, so load on a shared machine hits both alike).

    git worktree add /tmp/base <ref>
    .venv/bin/python bench/daemon_start_bench.py --base /tmp/base [-n 10] [--launch]

Each start gets a fresh SKYD_HOME (no clusters, no jobs): what every autostarted daemon
and every test daemon pays before it answers. The tree under test is this checkout.
``--launch`` also runs one `skyd launch` of a task pinned to `local` on each fresh daemon
and reports the daemon's CPU for that first launch (its threads included), then takes the
cluster down. Both trees are byte-compiled first, so neither pays for compiling.
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


TASK = "resources:\n  infra: local\nrun: echo hi\n"


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def cpu_to_ready(src: Path, launch: bool = False) -> tuple[float, float]:
    """CPU seconds the daemon of source tree `src` used until its socket accepted, and (with
    ``launch``) for its first launch of a `local` task (else 0)."""
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
            ready = _cpu(p.pid)
            if not launch:
                return ready, 0.0
            Path(f"{d}/task.yaml").write_text(TASK)

            def cli(*args: str) -> None:
                subprocess.run([sys.executable, "-m", "skyd.cli.main", *args], env=env, cwd=d,
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

            before = _cpu(p.pid)
            cli("launch", "-y", "-c", "bench", f"{d}/task.yaml")
            first = _cpu(p.pid) - before
            cli("down", "-y", "bench")
            return ready, first
        finally:
            p.terminate()
            p.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, type=Path, help="the other source tree")
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("--launch", action="store_true", help="also time a first `local` launch")
    a = ap.parse_args()
    for tree in (a.base, HERE):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "skyd")],
                       check=True, stdout=subprocess.DEVNULL)
    base, new = [], []
    for _ in range(a.n):
        base.append(cpu_to_ready(a.base, a.launch))
        new.append(cpu_to_ready(HERE, a.launch))
    for i, what in ((0, "to a listening daemon"), (1, "for its first local launch")):
        if i and not a.launch:
            break
        mb = statistics.median(b[i] for b in base)
        mn = statistics.median(n[i] for n in new)
        print(f"daemon CPU s {what}, median of {a.n}: base {mb:.2f}  this tree {mn:.2f}"
              f"  ratio base/this {mb / mn:.2f}")


if __name__ == "__main__":
    main()
