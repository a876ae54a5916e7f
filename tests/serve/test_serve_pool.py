"""`pool:` (SkyPilot worker pools) loads unchanged and is checked; the pool verbs check
their arguments before talking to the daemon."""

from __future__ import annotations

import pytest

from skyd.errors import InvalidSpecError
from skyd.models.loader import task_from_config

POOL = {"workers": 2, "min_workers": 1, "max_workers": 3, "queue_length_threshold": 4,
        "upscale_delay_seconds": 30, "downscale_delay_seconds": 60}


def test_pool_section_loads_unchanged() -> None:
    t = task_from_config({"setup": "echo hi", "pool": POOL})
    assert t.to_normalized()["pool"] == POOL


@pytest.mark.parametrize(("pool", "msg"), [
    ({"workers": -1}, "workers must be an integer >= 0"),
    ({"min_workers": 3, "max_workers": 1}, r"max_workers \(1\) < min_workers \(3\)"),
    ({"wokers": 2}, "unknown field 'wokers'"),
])
def test_pool_mistakes_name_the_field(pool: dict[str, int], msg: str) -> None:
    with pytest.raises(InvalidSpecError, match=msg) as e:
        task_from_config({"setup": "true", "pool": pool})
    assert (e.value.field or "").startswith("pool")


def test_pool_verbs_need_their_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """The pool verbs run (tests/jobs/test_jobs_pool.py); without a name they say what is missing."""
    from skyd.cli.main import main

    assert main(["jobs", "pool", "down"]) != 0
    assert "skyd jobs pool down NAME | -a" in capsys.readouterr().err
    assert main(["jobs", "pool", "apply", "x.yaml", "-p", "p1", "--workers", "-2"]) != 0
    assert "--workers must be an integer >= 0" in capsys.readouterr().err
