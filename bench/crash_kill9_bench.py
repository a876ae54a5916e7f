"""Pass rate of seeded `kill -9` trials of the daemon, per scenario.

    .venv/bin/python bench/crash_kill9_bench.py [-n 10] [--seed 1000] [-s launches -s aws ...]

Each trial (tests/support/crash_harness.py) runs one scenario (tests/support/crash_scenarios_local.py,
tests/support/crash_scenarios_infra.py) in a fresh SKYD_HOME with 1-2 kill -9 of the daemon at
seeded moments and restarts, then checks that every object ended as it would have and that
nothing is left (processes, sandboxes, SQLite rows, objects on the fake infrastructure).
Without -s: every scenario.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.crash_harness import InfraUnavailable, run_trial, scenarios  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10, help="trials per scenario")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("-s", "--scenario", action="append", help="a scenario (repeatable)")
    args = ap.parse_args()
    from tests.fakes.netguard import sitecustomize as netguard

    netguard.install()  # this process too: the fakes and the client stay on loopback
    names = args.scenario or sorted(scenarios())
    ok: Counter[str] = Counter()
    kills = 0
    t0 = time.monotonic()
    for name in names:
        for i in range(args.n):
            try:
                r = run_trial(args.seed + i, name)
            except InfraUnavailable as e:
                print(f"{name}: skipped ({e})", flush=True)
                break
            ok[name] += r.ok
            kills += r.kills
            print(f"{name} seed {r.seed}: {'ok' if r.ok else 'FAIL'} kills={r.kills}"
                  + ("" if r.ok else f" {r.problems}"), flush=True)
    total = sum(ok.values())
    print(f"pass rate: {total}/{args.n * len(names)}; {dict(ok)}; {kills} kills, "
          f"{time.monotonic() - t0:.0f}s, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
