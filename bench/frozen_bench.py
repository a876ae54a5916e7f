"""Frozen (one-file / one-folder) vs venv: size and start-up of the CLI.

    packaging/build.sh && .venv/bin/python bench/frozen_bench.py [--runs 10] [--first-runs 3]

Median wall time of `skyd --version`, `skyd --help` and `skyd status` (a daemon running,
started once per variant by that variant). The one-file build is measured twice: its first
run (each run with an empty unpack cache: it unpacks the one-folder tree, then runs it) and
later runs (cache filled: the launcher execs the cached binary).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONEFILE = ROOT / "dist/onefile/skyd"
VARIANTS = {
    "onefile (first run)": ONEFILE,
    "onefile (cached)": ONEFILE,
    "onedir": ROOT / "dist/onedir/skyd/skyd",
    "venv": ROOT / ".venv/bin/skyd",
}
COMMANDS = {"--version": ["--version"], "--help": ["--help"], "status": ["status"]}


def size_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


def timed(cmd: list[str], runs: int, fresh_cache: bool, scratch: Path) -> float:
    walls = []
    for i in range(runs):
        env = dict(os.environ)
        cache = scratch / f"cache-{i}"
        if fresh_cache:
            env["SKYD_ONEFILE_CACHE"] = str(cache)
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, timeout=120, env=env)
        walls.append((time.perf_counter() - t) * 1000)
        shutil.rmtree(cache, ignore_errors=True)
    return statistics.median(walls)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--first-runs", type=int, default=3, help="runs of the one-file's first run")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="skyd-frozen-bench-"))
    os.environ.update(SKYD_HOME=str(scratch / "home"),
                      SKYD_SOCKET=tempfile.mkdtemp(dir="/tmp") + "/s.sock",
                      SKYD_ONEFILE_CACHE=str(scratch / "onefile-cache"))
    print(f"{'variant':20} {'size':>9} " + " ".join(f"{c:>10}" for c in COMMANDS) + "  (median ms)")
    try:
        for name, exe in VARIANTS.items():
            if not exe.exists():
                print(f"{name:20} missing ({exe}); run packaging/build.sh")
                continue
            size = size_mb(exe if name != "onedir" else exe.parent) if name != "venv" else 0.0
            first = name.endswith("(first run)")
            subprocess.run([str(exe), "daemon", "start"], capture_output=True, check=True, timeout=120)
            try:
                runs = args.first_runs if first else args.runs
                cells = [timed([str(exe), *c], runs, first, scratch) for c in COMMANDS.values()]
            finally:
                subprocess.run([str(exe), "daemon", "stop"], capture_output=True, timeout=60)
            sz = f"{size:7.1f}MB" if size else "      n/a"
            print(f"{name:20} {sz:>9} " + " ".join(f"{v:10.0f}" for v in cells))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
