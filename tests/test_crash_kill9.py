"""kill -9 of the daemon at seeded moments on `local`: launches and managed jobs end as they
would have, nothing is left running (harness: tests/crash_harness.py). The many-trial
version is marked slow; bench/crash_kill9_bench.py prints the pass rate."""

from __future__ import annotations

import os

import pytest

from tests.crash_harness import run_trial

# Seeds whose kill points land mid-provisioning (agents started, handle not yet saved) and
# mid-run of managed jobs: the cases that once ended UNAUTHENTICATED / FAILED_NO_RESOURCE.
SEEDS = [16, 23]


@pytest.mark.parametrize("seed", SEEDS)
def test_kill9_daemon_seeded(seed: int) -> None:
    r = run_trial(seed)
    assert r.ok, r.problems
    assert r.kills >= 1 and r.failed_launches == 0, r


@pytest.mark.slow
def test_kill9_daemon_many_trials() -> None:
    n = int(os.environ.get("SKYD_CRASH_TRIALS", "30"))
    bad = [r for r in (run_trial(1000 + i) for i in range(n)) if not r.ok]
    assert not bad, [(r.seed, r.problems) for r in bad]
