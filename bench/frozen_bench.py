"""Frozen (one-file / one-folder) vs venv: size and start-up of the CLI.

    packaging/build.sh && .venv/bin/python bench/frozen_bench.py [--runs 10] [--first-runs 3]

Median wall time of `skyd --version`, `skyd --help` and `skyd status` (one daemon running,
started by the one-folder build). The variants' runs are interleaved (A B C A B C ...) so a
busy machine slows them alike. The one-file build is measured twice: its first run (each
run with an empty unpack cache: it unpacks the one-folder tree, then runs it) and later
runs (cache filled: the launcher execs the cached binary). Last line: the launcher's own
cost, a one-file build around /bin/true against /bin/true itself.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONEFILE = ROOT / "dist/onefile/skyd"
ONEDIR = ROOT / "dist/onedir/skyd/skyd"
VARIANTS = {  # name -> (executable, fresh unpack cache per run)
    "onefile (first run)": (ONEFILE, True),
    "onefile (cached)": (ONEFILE, False),
    "onedir": (ONEDIR, False),
    "venv": (ROOT / ".venv/bin/skyd", False),
}
COMMANDS = {"--version": ["--version"], "--help": ["--help"], "status": ["status"]}


def size_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


def wall_ms(cmd: list[str], env: dict[str, str] | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True, timeout=120, env=env)
    return (time.perf_counter() - t) * 1000


def launcher_overhead(scratch: Path, runs: int) -> tuple[float, float]:
    sys.path.insert(0, str(ROOT / "packaging"))
    import onefile

    tree = scratch / "true-tree" / "skyd"
    tree.mkdir(parents=True)
    shutil.copy2("/bin/true", tree / "skyd")
    exe = scratch / "true-onefile"
    onefile.build(tree, exe)
    wall_ms([str(exe)])  # first run: unpack
    a, b = [], []
    for _ in range(runs):
        a.append(wall_ms([str(exe)]))
        b.append(wall_ms(["/bin/true"]))
    return statistics.median(a), statistics.median(b)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--first-runs", type=int, default=3, help="runs of the one-file's first run")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="skyd-frozen-bench-"))
    os.environ.update(SKYD_HOME=str(scratch / "home"),
                      SKYD_SOCKET=tempfile.mkdtemp(dir="/tmp") + "/s.sock",
                      SKYD_ONEFILE_CACHE=str(scratch / "onefile-cache"))
    present = {n: v for n, v in VARIANTS.items() if v[0].exists()}
    for n in VARIANTS.keys() - present.keys():
        print(f"{n}: missing ({VARIANTS[n][0]}); run packaging/build.sh")
    try:
        subprocess.run([str(ONEDIR), "daemon", "start"], capture_output=True, check=True, timeout=120)
        for exe, _ in present.values():
            wall_ms([str(exe), "--version"])  # warm the page cache; fills the unpack cache
        walls: dict[tuple[str, str], list[float]] = {(n, c): [] for n in present for c in COMMANDS}
        try:
            for cname, cargs in COMMANDS.items():
                for i in range(args.runs):
                    for name, (exe, fresh) in present.items():
                        if fresh and i >= args.first_runs:
                            continue
                        env = dict(os.environ)
                        if fresh:
                            env["SKYD_ONEFILE_CACHE"] = str(scratch / f"fresh-{i}")
                        walls[(name, cname)].append(wall_ms([str(exe), *cargs], env))
                        if fresh:
                            shutil.rmtree(scratch / f"fresh-{i}")
        finally:
            subprocess.run([str(ONEDIR), "daemon", "stop"], capture_output=True, timeout=60)
        print(f"{'variant':20} {'size':>9} " + " ".join(f"{c:>10}" for c in COMMANDS) + "  (median ms)")
        for name, (exe, _) in present.items():
            size = 0.0 if name == "venv" else size_mb(exe if exe == ONEFILE else exe.parent)
            sz = f"{size:7.1f}MB" if size else "      n/a"
            cells = [statistics.median(walls[(name, c)]) for c in COMMANDS]
            print(f"{name:20} {sz:>9} " + " ".join(f"{v:10.0f}" for v in cells))
        with_launcher, bare = launcher_overhead(scratch, max(args.runs, 20))
        print(f"launcher: one-file around /bin/true {with_launcher:.1f} ms, /bin/true {bare:.1f} ms "
              f"(+{with_launcher - bare:.1f} ms)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
