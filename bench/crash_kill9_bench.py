"""Pass rate of seeded `kill -9` trials of the daemon on `local` (launches + managed jobs).

    .venv/bin/python bench/crash_kill9_bench.py [-n 50] [--seed 1000]

Each trial (tests/crash_harness.py): a fresh SKYD_HOME, 2 followed launches (some --down)
and 2 managed jobs, 1-2 kill -9 of the daemon at seeded moments with restarts, then checks
that every launch/managed job ended as it would have, and no process or sandbox is left.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.crash_harness import run_trial  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1000)
    args = ap.parse_args()
    ok = kills = failed_launches = 0
    t0 = time.monotonic()
    for i in range(args.n):
        r = run_trial(args.seed + i)
        ok += r.ok
        kills += r.kills
        failed_launches += r.failed_launches
        print(f"seed {r.seed}: {'ok' if r.ok else 'FAIL'} kills={r.kills}"
              + ("" if r.ok else f" {r.problems}"), flush=True)
    print(f"pass rate: {ok}/{args.n} ({100.0 * ok / max(1, args.n):.0f}%), {kills} kills,"
          f" {failed_launches} launches FAILED cleanly, {time.monotonic() - t0:.0f}s")


if __name__ == "__main__":
    main()
