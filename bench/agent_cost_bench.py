"""A node agent's own CPU: to start (exec to agent.json written, listening) and while idle,
for two source trees side by side (alternating, so load on a shared machine hits both).

    git worktree add /tmp/base <ref>
    .venv/bin/python bench/agent_cost_bench.py --base /tmp/base [-n 5] [--idle 20]

Two kinds of agent, as the daemon starts them:
- ``local``: ``python -m skyd.nodeagent`` from the tree (byte-compiled first);
- ``zipapp``: ``python3 agent-<sha>.pyz``, the archive each tree builds for SSH pools, VMs,
  pods and Slurm (built once per tree before the rounds).
Each start gets a fresh agent home and credentials; the agent then sits idle (no job) for
``--idle`` seconds at the default tick and heartbeat, and its CPU over that time is the
idle cost. Figures are medians of ``-n`` starts per tree and kind.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SECRET = "bench-agent-secret"


def _cpu(pid: int) -> float:
    """CPU seconds of all the process's threads, to the nanosecond (schedstat), where
    /proc/PID/stat counts 10 ms clock ticks: an idle agent uses a few ms a minute."""
    return sum(int((t / "schedstat").read_text().split()[0])
               for t in Path(f"/proc/{pid}/task").iterdir()) / 1e9


def build_zipapp(src: Path, out: Path) -> None:
    code = ("import sys; from pathlib import Path; from skyd.nodeagent.zipapp import build_zipapp; "
            "build_zipapp(Path(sys.argv[1]))")
    subprocess.run([sys.executable, "-c", code, str(out)], check=True, cwd=str(out.parent),
                   env={**os.environ, "PYTHONPATH": str(src)})


def one_agent(src: Path, pyz: Path | None, idle: float) -> tuple[float, float]:
    """(CPU s to listening, CPU s over `idle` seconds idle) of one agent of tree `src`."""
    sys.path.insert(0, str(HERE))
    from skyd.nodeagent.credentials import write_agent_credentials

    with tempfile.TemporaryDirectory(prefix="skyd-agent-bench-") as d:
        home = Path(d) / "home"
        home.mkdir()
        write_agent_credentials(home, SECRET)
        args = ["--home", str(home), "--listen", "127.0.0.1:0"]
        if pyz is None:
            cmd = [sys.executable, "-m", "skyd.nodeagent", *args]
            env = {**os.environ, "PYTHONPATH": str(src)}
        else:
            cmd = [sys.executable, "-I", str(pyz), *args]
            env = dict(os.environ)
        p = subprocess.Popen(cmd, env=env, cwd=d, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if json.loads((home / "agent.json").read_text()).get("pid") == p.pid:
                        break
                except (OSError, ValueError):
                    pass
                if p.poll() is not None:
                    raise RuntimeError(f"agent of {src} exited {p.returncode}")
                time.sleep(0.01)
            else:
                raise RuntimeError(f"agent of {src} did not start")
            start = _cpu(p.pid)
            time.sleep(idle)
            return start, _cpu(p.pid) - start
        finally:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, type=Path, help="the other source tree")
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--idle", type=float, default=20.0, help="idle seconds measured per agent")
    a = ap.parse_args()
    trees = {"base": a.base.resolve(), "this tree": HERE}
    for src in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src / "skyd")], check=True,
                       stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="skyd-agent-zips-") as z:
        zips = {}
        for label, src in trees.items():
            zips[label] = Path(z) / f"{label.replace(' ', '-')}.pyz"
            build_zipapp(src, zips[label])
        got: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(a.n):
            for kind in ("local", "zipapp"):
                for label, src in trees.items():
                    pyz = zips[label] if kind == "zipapp" else None
                    got.setdefault((kind, label), []).append(one_agent(src, pyz, a.idle))
        for kind in ("local", "zipapp"):
            for i, what in enumerate(("CPU s to listening", f"CPU s over {a.idle:g} s idle")):
                b = statistics.median(r[i] for r in got[(kind, "base")])
                t = statistics.median(r[i] for r in got[(kind, "this tree")])
                print(f"{kind} agent, {what}, median of {a.n}: base {b:.3f}  this tree {t:.3f}"
                      f"  ratio base/this {b / t if t else float('inf'):.2f}")


if __name__ == "__main__":
    main()
