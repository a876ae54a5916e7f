"""kill -9 of the daemon at seeded moments on `local`: launches and managed jobs end as they
would have, nothing is left running (harness: tests/support/crash_harness.py, scenario ``launches``).
``SKYD_CRASH_TRIALS=N`` runs N more seeds of every scenario (tests/daemon/test_crash_kill9_serve.py,
tests/daemon/test_crash_kill9_infra.py); bench/crash_kill9_bench.py prints the pass rate."""

from __future__ import annotations

import os

import pytest

from tests.support.crash_harness import run_trial

# Seeds whose kill points land mid-provisioning (agents started, handle not yet saved) and
# mid-run of managed jobs: the cases that once ended UNAUTHENTICATED / FAILED_NO_RESOURCE.
SEEDS = [16, 23]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", SEEDS)
def test_kill9_daemon_seeded(seed: int) -> None:
    r = run_trial(seed, "launches")
    assert r.ok, r.problems
    assert r.kills >= 1 and r.failed_launches == 0, r


def many_seeds(base: int) -> list[int]:
    """The seeds of the many-trial runs: SKYD_CRASH_TRIALS of them (0 when unset)."""
    return [base + i for i in range(int(os.environ.get("SKYD_CRASH_TRIALS", "0") or 0))]


@pytest.mark.slow
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("seed", many_seeds(1000))
def test_kill9_daemon_many_trials(seed: int) -> None:
    r = run_trial(seed, "launches")
    assert r.ok, r.problems
