"""`launch --dryrun`'s LAUNCH column runs the checks the launch runs before provisioning:
it says "now" only where the real launch goes ahead."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import cli, running_daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    base = tmp_path_factory.mktemp("dry")
    mp = pytest.MonkeyPatch()
    mp.setenv("SKYD_HOME", str(base / "home"))
    mp.setenv("SKYD_SOCKET", str(base / "s.sock"))
    mp.setenv("SKYD_CONFIG_DIR", str(base / "config"))
    mp.delenv("SKYD_CATALOG_DIR", raising=False)
    try:
        with running_daemon() as d:
            yield d
    finally:
        mp.undo()


def _plan(path: Path) -> dict[str, Any]:
    r = cli("launch", "--dryrun", "-o", "json", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(json.loads(r.stdout))


def _local_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in doc["tasks"][0]["considered"] if c["cloud"] == "local"]


def test_image_id_on_local_is_not_marked_launchable(daemon: Any, tmp_path: Path) -> None:
    y = tmp_path / "img.yaml"
    # (a docker: image runs on local in a container, skyd.transports.container; a machine
    # image cannot)
    y.write_text("resources:\n  infra: local\n  image_id: ami-0123456789abcdef0\nrun: echo hi\n")
    doc = _plan(y)
    rows = _local_rows(doc)
    assert rows and not any(r["launch"] for r in rows), rows
    assert "image_id" in rows[0]["refused"]
    assert doc["launchable"] is False and "image_id" in doc["launch_error"]
    table = cli("launch", "--dryrun", str(y)).stdout
    local_line = next(ln for ln in table.splitlines() if ln.startswith("local"))
    assert "now" not in local_line and "✔" not in local_line, table
    assert "launch refuses (local)" in table and "image_id" in table
    # ... and the launch itself refuses it, before anything is made.
    r = cli("launch", "-y", "-c", "img", str(y))
    assert r.returncode == 2 and "image_id" in r.stderr
    assert json.loads(cli("status", "-o", "json").stdout) == []


def test_git_workdir_plans_and_missing_sources_are_refused_before_the_plan(
        daemon: Any, tmp_path: Path) -> None:
    """A git workdir is cloned on this machine at launch (skyd.pipeline.gitworkdir): the dry
    run plans it as the launch runs it, and clones nothing. A missing local source is refused
    when the request is submitted (the launch's own precheck), for the dry run as for the
    launch: exit 2 naming the field, nothing made."""
    y = tmp_path / "git.yaml"
    y.write_text("workdir:\n  url: https://github.com/example/repo.git\n  ref: main\nrun: echo hi\n")
    doc = _plan(y)
    assert doc["launchable"] is True and doc["launch_error"] is None
    y2 = tmp_path / "src.yaml"
    y2.write_text(f"file_mounts:\n  /data: {tmp_path / 'nope'}\nrun: echo hi\n")
    for args in (("launch", "--dryrun", str(y2)), ("launch", "-y", "-c", "src", str(y2))):
        r = cli(*args)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "file_mounts./data" in r.stderr and "does not exist" in r.stderr
    assert json.loads(cli("status", "-o", "json").stdout) == []


def test_a_launchable_plan_still_says_now(daemon: Any, tmp_path: Path) -> None:
    y = tmp_path / "ok.yaml"
    y.write_text("resources:\n  infra: local\nrun: echo hi\n")
    doc = _plan(y)
    rows = _local_rows(doc)
    assert rows[0]["launch"] and rows[0]["chosen"] and rows[0]["refused"] is None
    assert doc["launchable"] is True and doc["launch_error"] is None


def test_a_dry_run_on_an_existing_cluster_says_reuse_or_refusal(daemon: Any, tmp_path: Path) -> None:
    try:
        assert cli("launch", "-y", "-c", "dr-fit", "echo up").returncode == 0
        y = tmp_path / "two.yaml"
        y.write_text("num_nodes: 2\nrun: echo hi\n")
        r = cli("launch", "--dryrun", "-o", "json", "-c", "dr-fit", str(y))
        doc = json.loads(r.stdout)
        assert doc["launchable"] is False and "2 nodes" in doc["launch_error"], doc["launch_error"]
        assert not any(c["launch"] for c in doc["tasks"][0]["considered"])
        r = cli("launch", "-y", "-c", "dr-fit", str(y))
        assert r.returncode != 0 and "2 nodes" in r.stderr
        one = tmp_path / "one.yaml"
        one.write_text("run: echo hi\n")
        doc = json.loads(cli("launch", "--dryrun", "-o", "json", "-c", "dr-fit", str(one)).stdout)
        assert doc["launchable"] is True and doc["reuses"] == "dr-fit"
        assert "reuses it" in cli("launch", "--dryrun", "-c", "dr-fit", str(one)).stdout
    finally:
        cli("down", "-y", "dr-fit")
