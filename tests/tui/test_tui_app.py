"""The TUI against a real daemon (rows seeded in its SQLite), driven with Textual's Pilot."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyd.sdk.transport import Client
from skyd.tui.app import SkydApp
from skyd.tui.screens.confirm import ConfirmScreen
from skyd.tui.screens.logs import LogScreen
from tests.support.tui import screen_text, seed_db, start_daemon, stop_daemon, wait_for

CLUSTERS = [
    {"name": "train-a100", "status": "UP", "cloud": "aws", "region": "us-east-1",
     "instance_type": "p4d.24xlarge", "accelerators": '{"A100": 8}', "hourly_cost": 32.7726,
     "autostop_minutes": 10, "autostop_down": 1},
    {"name": "dev-box", "status": "STOPPED", "cloud": "local", "hourly_cost": 0.0},
    {"name": "serve-mi300", "status": "INIT", "cloud": "runpod", "region": "EU-RO-1",
     "accelerators": '{"MI300X": 1}', "hourly_cost": 2.49},
]


@pytest.fixture
def daemon(skyd_home: Path) -> Iterator[Path]:
    os.environ["SKYD_NO_AUTOSTART"] = "1"
    seed_db(CLUSTERS)
    start_daemon()
    try:
        yield skyd_home
    finally:
        stop_daemon()
        os.environ.pop("SKYD_NO_AUTOSTART", None)


def loaded(app: SkydApp) -> bool:
    return app.painted_at is not None


@pytest.mark.anyio
async def test_clusters_screen_at_80x24(daemon: Path) -> None:
    app = SkydApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: loaded(app), what="first paint")
        await pilot.pause(0.2)
        text = screen_text(app)
        for s in ("1 Clusters", "train-a100", "dev-box", "serve-mi300", "STOPPED", "INIT",
                  "$32.77", "3 clusters, 1 up, $32.77/h", "Launch", "Quit"):
            assert s in text, f"{s!r} not on screen:\n{text}"
        t = app.pane("clusters").table
        assert t.row_count == 3
        assert tuple(t.get_row_at(2)[:4]) == ("train-a100", "UP", "aws/us-east-1",
                                       "1x p4d.24xlarge {A100:8}")
        assert t.get_row_at(2)[5] == "10 min down"
        assert "connected" in app.sub_title


@pytest.mark.anyio
async def test_navigate_tabs_and_unavailable_features(daemon: Path) -> None:
    app = SkydApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: loaded(app), what="first paint")
        await pilot.press("down")  # serve-mi300 (rows sorted by name: dev-box, serve, train)
        await wait_for(pilot, lambda: app.selected_cluster == "serve-mi300", what="selection")
        await pilot.press("2")
        await wait_for(pilot, lambda: "serve-mi300" in screen_text(app), what="jobs caption")
        assert "jobs on serve-mi300" in screen_text(app)
        await pilot.press("4")
        await pilot.pause(0.1)
        assert "no services" in screen_text(app)  # serve is in the daemon now
        await pilot.press("3")
        await pilot.pause(0.1)
        assert app.query_one("TabbedContent").active == "tab-managed"  # type: ignore[attr-defined]
        await pilot.press("1")
        await pilot.press("enter")  # cluster -> its jobs
        await pilot.pause(0.1)
        assert app.query_one("TabbedContent").active == "tab-jobs"  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_requests_update_live_and_log_viewer_search_pause(daemon: Path) -> None:
    app = SkydApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: loaded(app), what="first paint")
        await pilot.press("5")
        reqs = app.pane("requests")
        assert reqs.table.row_count == 0
        with Client(autostart=False) as c:  # a request made elsewhere (another terminal)
            rid = c.submit("sleep", {"seconds": 0.6, "log_every": 0.1})
        # No key pressed: the watch stream pushes it in, then its final status.
        await wait_for(pilot, lambda: rid in reqs.rows, what="request row")
        await wait_for(pilot, lambda: reqs.rows[rid]["status"] == "SUCCEEDED", what="SUCCEEDED")
        assert app.events_seen >= 2
        # the row's data is updated before the next repaint shows it
        await wait_for(pilot, lambda: "SUCCEEDED" in screen_text(app), what="SUCCEEDED on screen")
        await pilot.press("enter")
        assert isinstance(app.screen, LogScreen)
        log = app.screen
        await wait_for(pilot, lambda: log.ended is not None, what="end of request log")
        assert any("slept 0.6s" in ln for ln in log.lines)
        assert log.lines[-1] == "== request SUCCEEDED"
        await pilot.press("slash")
        await pilot.press(*"SLEPT", "enter")
        assert len(log.matches) == 6 and log.match_pos == 0
        await pilot.press("n")
        assert log.match_pos == 1
        await pilot.press("p")
        assert log.paused and "PAUSED" in screen_text(app)
        log._add(["arrives while paused"])
        assert "arrives while paused" not in log.lines
        await pilot.press("p")
        assert log.lines[-1] == "arrives while paused"
        await pilot.press("escape")
        assert not isinstance(app.screen, LogScreen)


@pytest.mark.anyio
async def test_actions_need_confirmation(daemon: Path) -> None:
    app = SkydApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: loaded(app), what="first paint")
        await pilot.press("d")  # down dev-box (first row)
        assert isinstance(app.screen, ConfirmScreen)
        assert "Tear down cluster 'dev-box'?" in screen_text(app)
        await pilot.press("n")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.pause(0.2)
        with Client(autostart=False) as c:
            assert c.get("/v1/requests") == []  # nothing was sent
        await pilot.press("d", "y")
        await pilot.pause(0.3)
        with Client(autostart=False) as c:
            rows = c.get("/v1/requests")
        # The daemon got the down request, or refused the verb (pipeline not loaded): either
        # way the TUI said something; with the pipeline there is a `down` request row.
        notes = [n.message for n in app._notifications]
        assert any(r["verb"] == "down" for r in rows) or any("down" in m for m in notes), notes


@pytest.mark.anyio
async def test_no_color_is_respected(daemon: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.filter import Monochrome, NoColor

    monkeypatch.setenv("NO_COLOR", "1")
    app = SkydApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: loaded(app), what="first paint")
        assert app.no_color
        assert any(isinstance(f, Monochrome | NoColor) for f in app._filters)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert not SkydApp().no_color
