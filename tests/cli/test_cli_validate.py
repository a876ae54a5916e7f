"""``skyd validate`` reports every error of a file, each with field, line and fix."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.daemon import cli

BAD = ("name: t\nnum_nodes: -1\nresouces: {cpus: 2}\nresources:\n  cpus: lots\n"
       "  accelerators: H10O:8\nrun: echo x\n")


def test_validate_lists_every_error(tmp_path: Path) -> None:
    y = tmp_path / "t.yaml"
    y.write_text(BAD)
    r = cli("validate", str(y))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert errs == [
        "error: num_nodes: num_nodes must be an integer >= 1, got -1 (line 2)",
        "error: resouces: unknown field 'resouces' (line 3)",
        "error: resources.cpus: bad cpus 'lots' (line 5)",
        "error: resources.accelerators: unknown accelerator 'H10O' (line 6)",
    ]
    assert r.stderr.count("hint: ") == 4 and "did you mean 'resources'?" in r.stderr
    assert r.stdout == ""


def test_validate_json_lists_every_error(tmp_path: Path) -> None:
    y = tmp_path / "t.yaml"
    y.write_text(BAD)
    r = cli("validate", "-o", "json", str(y))
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 2 and doc["type"] == "InvalidSpecError"
    assert [(e["field"], e["line"]) for e in doc["errors"]] == [
        ("num_nodes", 2), ("resouces", 3), ("resources.cpus", 5), ("resources.accelerators", 6)]
    assert all(e["message"] and e["hint"] for e in doc["errors"])


def test_validate_json_single_error_and_job_group(tmp_path: Path) -> None:
    y = tmp_path / "t.yaml"
    y.write_text("resources:\n  accelerators: tpu-v5litepod-16\n  gpus: T4\n")
    r = cli("validate", "-o", "json", str(y))
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert [(e["field"], e["line"]) for e in doc["errors"]] == [("resources.gpus", 3)]
    y.write_text("name: g\nexecution: parallel\n---\nname: a\nrun: a\n---\nname: b\nrun: b\n")
    r = cli("validate", "-o", "json", str(y))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["execution"] == "parallel" and [t["name"] for t in doc["tasks"]] == ["a", "b"]
