"""Pure parts of the TUI: formatting, event routing, coalescing, launch payloads."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from skyd.errors import InvalidSpecError
from skyd.tui import fmt
from skyd.tui.live import PANES, Coalescer, panes_for
from skyd.tui.screens.launch import build_payload, plan_text


def test_cluster_cells_show_what_a_user_reads() -> None:
    row = {"name": "gpu", "status": "UP", "cloud": "aws", "region": "us-east-1",
           "instance_type": "p4d.24xlarge", "accelerators": {"A100": 8}, "num_nodes": 2,
           "use_spot": True, "hourly_cost": 32.7726, "autostop_minutes": 10,
           "autostop_down": True, "launched_at": 1000.0}
    assert fmt.cluster_cells(row, now=1000.0 + 3 * 3600 + 125) == (
        "gpu", "UP", "aws/us-east-1", "2x p4d.24xlarge {A100:8} [spot]", "$32.77",
        "10 min down", "3h 02m")
    assert fmt.autostop({"autostop_minutes": None}) == "-"
    assert fmt.duration(59) == "59s" and fmt.duration(3 * 86400 + 7200) == "3d 2h"


def test_events_route_to_the_tables_they_change() -> None:
    assert panes_for("requests") == ("requests", "clusters", "jobs")
    assert panes_for("services") == ("services",)
    assert panes_for("_overflow") == PANES and panes_for("_hello") == PANES


@pytest.mark.anyio
async def test_coalescer_runs_once_more_after_a_burst() -> None:
    calls: list[str] = []
    gate = anyio.Event()

    async def reload(name: str) -> None:
        calls.append(name)
        await gate.wait()

    async with anyio.create_task_group() as tg:
        c = Coalescer(reload, lambda fn: tg.start_soon(fn))  # type: ignore[arg-type]
        c.poke("clusters")
        await anyio.sleep(0.01)  # the read is in flight now
        for _ in range(20):
            c.poke("clusters")
        await anyio.sleep(0.01)
        assert calls == ["clusters"]
        gate.set()
        await anyio.sleep(0.2)
    assert calls == ["clusters", "clusters"]  # 20 events -> 2 reads, not 20


def test_launch_payload_carries_overrides(tmp_path: Path) -> None:
    y = tmp_path / "t.yaml"
    y.write_text("run: echo hi\n")
    p = build_payload(str(y), cluster="c1", gpus="H100:8", infra="aws", spot=True,
                      num_nodes="2", dryrun=True)
    assert p["overrides"] == {"gpus": "H100:8", "infra": "aws", "use_spot": True, "num_nodes": 2}
    assert p["dryrun"] is True and p["cluster_name"] == "c1" and p["yaml"] == "run: echo hi\n"
    assert p["base_dir"] == str(tmp_path.resolve())
    with pytest.raises(InvalidSpecError, match="num_nodes"):
        build_payload(str(y), cluster="", gpus="", infra="", spot=False, num_nodes="0", dryrun=False)
    with pytest.raises(InvalidSpecError, match="cannot read"):
        build_payload(str(tmp_path / "nope.yaml"), cluster="", gpus="", infra="", spot=False,
                      num_nodes="", dryrun=False)


def test_plan_text_lists_choice_and_alternatives() -> None:
    plan = {"objective": "cost", "total_hourly_cost": 2.5, "tasks": [{
        "name": "train", "chosen": {"cloud": "gcp", "region": "us-central1",
                                    "instance_type": "a2-highgpu-1g", "hourly_cost": 2.5},
        "alternatives": [{"cloud": "aws", "region": "us-east-1", "instance_type": "p3.2xlarge",
                          "hourly_cost": 3.06}]}]}
    text = plan_text(plan)
    assert "total: $2.50/h" in text
    assert "gcp/us-central1 a2-highgpu-1g" in text and "chosen" in text
    assert "aws/us-east-1 p3.2xlarge" in text and "$3.06/h" in text
