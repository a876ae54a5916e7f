"""Frozen (PyInstaller onefile / onedir) vs venv: size and start-up of the CLI.

    packaging/build.sh && .venv/bin/python bench/frozen_bench.py [--runs 10]

Median wall time of `skyd --version`, `skyd --help` and `skyd status` (a daemon running,
started once per variant by that variant) over --runs runs each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "onefile": [str(ROOT / "dist/onefile/skyd")],
    "onedir": [str(ROOT / "dist/onedir/skyd/skyd")],
    "venv": [str(ROOT / ".venv/bin/skyd")],
}
COMMANDS = {"--version": ["--version"], "--help": ["--help"], "status": ["status"]}


def size_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


def timed(cmd: list[str], runs: int) -> float:
    walls = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, timeout=60)
        walls.append((time.perf_counter() - t) * 1000)
    return statistics.median(walls)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    os.environ.update(SKYD_HOME=tempfile.mkdtemp(prefix="skyd-frozen-bench-"),
                      SKYD_SOCKET=tempfile.mkdtemp(dir="/tmp") + "/s.sock")
    print(f"{'variant':8} {'size':>9} " + " ".join(f"{c:>10}" for c in COMMANDS) + "  (median ms)")
    for name, base in VARIANTS.items():
        exe = Path(base[0])
        if not exe.exists():
            print(f"{name:8} missing ({exe}); run packaging/build.sh")
            continue
        size = size_mb(exe if name != "onedir" else exe.parent) if name != "venv" else 0.0
        subprocess.run([*base, "daemon", "start"], capture_output=True, check=True, timeout=60)
        try:
            cells = [timed([*base, *c], args.runs) for c in COMMANDS.values()]
        finally:
            subprocess.run([*base, "daemon", "stop"], capture_output=True, timeout=60)
        sz = f"{size:7.1f}MB" if size else "      n/a"
        print(f"{name:8} {sz:>9} " + " ".join(f"{v:10.0f}" for v in cells))


if __name__ == "__main__":
    main()
