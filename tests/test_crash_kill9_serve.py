"""kill -9 of the daemon during `serve up`, `serve update` (rolling and blue/green), `serve
down`, `jobs pool apply`/`down` and `down -a` of several clusters, at seeded moments: every
object ends where it would have, nothing is left (harness: tests/crash_harness_serve.py).
The many-trial version is marked slow."""

from __future__ import annotations

import os

import pytest

from tests.crash_harness_serve import SCENARIOS, run_trial

SEEDED = [("update", 3), ("update_bg", 5), ("up", 7), ("down", 11), ("pool", 13),
          ("down_all", 17)]


@pytest.mark.parametrize(("scenario", "seed"), SEEDED)
def test_kill9_daemon_serving_and_pools(scenario: str, seed: int) -> None:
    r = run_trial(seed, scenario)
    assert r.ok, r.problems
    assert r.kills >= 1, r


@pytest.mark.slow
def test_kill9_daemon_serving_many_trials() -> None:
    n = int(os.environ.get("SKYD_CRASH_TRIALS", "5"))
    bad = [(s, r.seed, r.problems) for s in SCENARIOS
           for r in (run_trial(2000 + i, s) for i in range(n)) if not r.ok]
    assert not bad, bad
