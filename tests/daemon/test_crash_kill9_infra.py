"""kill -9 of the daemon at seeded moments during launches on each fake infrastructure (AWS
on moto, the GCE fake, the Kubernetes fake, a neocloud fake, Slurm) and during bucket
file_mounts (a local directory uploaded to S3 and COPY-ed onto the nodes, a COPY from an
existing bucket): every launch ends as it would have and nothing skyd made is left on the
fake (harness: tests/support/crash_harness.py, scenarios in tests/support/crash_scenarios_infra.py).
``SKYD_CRASH_TRIALS=N`` adds N seeds of each scenario (marked slow)."""

from __future__ import annotations

import pytest

from tests.daemon.test_crash_kill9 import many_seeds
from tests.support.crash_harness import InfraUnavailable, TrialResult, run_trial

SEEDED = [("aws", 31), ("gcp", 37), ("kubernetes", 41), ("runpod", 43), ("slurm", 47),
          ("storage", 53)]
SCENARIOS = sorted({s for s, _ in SEEDED})


def _trial(seed: int, scenario: str) -> TrialResult:
    try:
        return run_trial(seed, scenario)
    except InfraUnavailable as e:
        pytest.skip(str(e))


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("scenario", "seed"), SEEDED)
def test_kill9_daemon_on_each_infra(scenario: str, seed: int) -> None:
    r = _trial(seed, scenario)
    assert r.ok, r.problems
    assert r.kills >= 1, r


@pytest.mark.slow
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("seed", many_seeds(3000))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_kill9_daemon_on_each_infra_many_trials(scenario: str, seed: int) -> None:
    r = _trial(seed, scenario)
    assert r.ok, r.problems
