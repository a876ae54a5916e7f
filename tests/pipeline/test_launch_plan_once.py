"""A launch plans once: the plan the dry run (the interactive confirmation) showed is the
one the launch runs, named by its id; when the catalogs changed in between, the launch
plans again and says why. Observed through the request's own events (its OPTIMIZE stage
and log), with a real daemon (one for the module) and the real CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import SKYD_BIN, cli

SHARED_DAEMON_ENV: dict[str, str] = {}  # the tests taking `daemon` share one (tests/support/plugin.py)


def _events(rid: str) -> tuple[list[dict[str, Any]], Any]:
    from skyd import sdk

    events: list[dict[str, Any]] = []
    gen = sdk.stream_and_get(rid)
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return events, stop.value


def _optimized(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e.get("type") == "stage" and e.get("name") == "OPTIMIZE"
                and e.get("state") == "done")


def _log(events: list[dict[str, Any]]) -> str:
    return "".join(str(e.get("text", "")) for e in events if e.get("type") == "log")


def _payload(tmp_path: Path, catalogs: Path, **kw: Any) -> dict[str, Any]:
    from skyd.sdk.payloads import launch_payload, task_source

    f = tmp_path / "task.yaml"
    f.write_text("resources:\n  cpus: 1+\nrun: echo planned-once\n")
    p = launch_payload(task_source(str(f)), detach_run=True, **kw)
    return {**p, "catalog_dir": str(catalogs)}


def _catalogs(tmp_path: Path) -> Path:
    """A catalog directory holding a cloud this build has no credentials for: the plan lands
    on `local`, and the file is what changes between the dry run and the launch."""
    import skyd.clouds

    d = tmp_path / "catalogs"
    d.mkdir()
    shutil.copy(Path(skyd.clouds.__file__).parent / "data" / "lambda.csv", d / "lambda.csv")
    return d


def test_the_launch_runs_the_plan_the_dry_run_showed(daemon: Any, tmp_path: Path) -> None:
    from skyd import sdk

    cats = _catalogs(tmp_path)
    shown = sdk.get_result(sdk.submit("launch", {**_payload(tmp_path, cats), "dryrun": True}))
    pid = shown["plan_id"]
    assert isinstance(pid, str) and len(pid) == 16
    events, result = _events(sdk.submit("launch", {**_payload(tmp_path, cats, cluster_name="p1"),
                                                   "plan_id": pid}))
    opt = _optimized(events)
    assert opt["reused"] is True and opt["plan_id"] == pid, opt
    assert f"Launching the plan shown (plan {pid})" in _log(events)
    assert result["cluster"] == "p1"
    # Without a plan id (`-y`, scripts): the launch plans, and says nothing of a shown plan.
    events, _ = _events(sdk.submit("launch", _payload(tmp_path, cats, cluster_name="p2")))
    opt = _optimized(events)
    assert opt["reused"] is False and opt["plan_id"] == pid
    assert "plan shown" not in _log(events) and "Planning again" not in _log(events)


def test_a_changed_catalog_is_planned_again_and_said(daemon: Any, tmp_path: Path) -> None:
    from skyd import sdk

    cats = _catalogs(tmp_path)
    shown = sdk.get_result(sdk.submit("launch", {**_payload(tmp_path, cats), "dryrun": True}))
    with open(cats / "lambda.csv", "a") as f:  # the catalog is refreshed in between
        f.write("\n")
    events, _ = _events(sdk.submit("launch", {**_payload(tmp_path, cats, cluster_name="p3"),
                                              "plan_id": shown["plan_id"]}))
    assert _optimized(events)["reused"] is False
    assert "Planning again: the catalogs or enabled infras changed" in _log(events)
    # A plan id shown for another task is not run for this one.
    events, _ = _events(sdk.submit("launch", {**_payload(tmp_path, cats, cluster_name="p4"),
                                              "plan_id": "0123456789abcdef"}))
    assert _optimized(events)["reused"] is False
    assert "Planning again: the task or its options differ" in _log(events)


def test_a_bad_plan_id_is_refused_naming_the_field(daemon: Any, tmp_path: Path) -> None:
    from skyd import sdk
    from skyd.errors import SkydError

    cats = _catalogs(tmp_path)
    with pytest.raises(SkydError) as e:
        sdk.submit("launch", {**_payload(tmp_path, cats), "plan_id": 7})
    assert "plan_id" in str(e.value) + str(getattr(e.value, "field", ""))


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux `script` for a TTY")
def test_the_confirmed_cli_launch_does_not_plan_again(daemon: Any, tmp_path: Path) -> None:
    before = {row["id"] for row in json.loads(cli("requests", "ls", "-o", "json").stdout)}
    r = subprocess.run(
        ["script", "-qec", f"{SKYD_BIN} launch -c confirmed 'echo confirmed-ok'", "/dev/null"],
        input="y\n", capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0 and "confirmed-ok" in r.stdout, r.stdout
    assert "Proceed? [Y/n]" in r.stdout
    rows = json.loads(cli("requests", "ls", "-o", "json").stdout)
    launches = [row for row in rows if row.get("verb") == "launch" and row["id"] not in before]
    assert len(launches) == 2  # the dry run shown, then the launch
    from skyd import sdk

    stages = {json.dumps(sdk.requests_get(row["id"]).get("stages")) for row in launches}
    assert any('"reused": true' in s for s in stages), stages
