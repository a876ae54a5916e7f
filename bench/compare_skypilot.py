"""Side by side in one run: skyd's CLI start vs SkyPilot's, when SkyPilot is installed here.

    python3 -m venv /tmp/skyvenv && /tmp/skyvenv/bin/pip install skypilot==0.14.1
    SKYPILOT_VENV=/tmp/skyvenv .venv/bin/python bench/compare_skypilot.py

Times (median of N, wall) `--help` of both CLIs and the import of each package's top level.
SkyPilot is not a dependency of skyd; without SKYPILOT_VENV this prints skyd's side only.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

N = int(os.environ.get("N", "10"))
SKYD = Path(sys.executable).parent / "skyd"


def wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t0) * 1000


def median(argv: list[str]) -> float:
    wall(argv)  # warm the page cache
    return statistics.median(wall(argv) for _ in range(N))


def main() -> None:
    rows = [("python -c pass", [sys.executable, "-c", "pass"], None)]
    venv = os.environ.get("SKYPILOT_VENV")
    rows.append(("skyd --help", [str(SKYD), "--help"], None))
    if venv:
        rows.append(("sky --help (SkyPilot)", [f"{venv}/bin/sky", "--help"], None))
    rows.append(("import skyd.cli.main", [sys.executable, "-c", "import skyd.cli.main"], None))
    if venv:
        rows.append(("import sky (SkyPilot)", [f"{venv}/bin/python", "-c", "import sky"], None))
    print(f"median of {N} runs, wall ms")
    for name, argv, _ in rows:
        print(f"  {name:28s} {median(argv):8.1f} ms")
    if not venv:
        print("  (set SKYPILOT_VENV to a venv with skypilot installed for the side-by-side)")


if __name__ == "__main__":
    main()
