"""The TUI's Requests tab stays live, and the launch form's hints name real keys."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyd.sdk.transport import Client
from skyd.tui.app import SkydApp
from skyd.tui.screens.logs import LogScreen
from tests.support.tui import screen_text, seed_db, start_daemon, stop_daemon, wait_for


@pytest.fixture
def daemon(skyd_home: Path) -> Iterator[Path]:
    os.environ["SKYD_NO_AUTOSTART"] = "1"
    seed_db([])
    start_daemon()
    try:
        yield skyd_home
    finally:
        stop_daemon()
        os.environ.pop("SKYD_NO_AUTOSTART", None)


@pytest.mark.anyio
async def test_requests_tab_stays_live(daemon: Path) -> None:
    app = SkydApp()
    async with app.run_test(size=(100, 24)) as pilot:
        await wait_for(pilot, lambda: app.painted_at is not None, what="first paint")
        await pilot.press("5")
        reqs = app.pane("requests")
        with Client(autostart=False) as c:
            first = c.submit("sleep", {"seconds": 0.2})
        await wait_for(pilot, lambda: reqs.rows.get(first, {}).get("status") == "SUCCEEDED",
                       what="first request done")
        # Open its log and come back: the tab keeps following what happens.
        await pilot.press("enter")
        assert isinstance(app.screen, LogScreen)
        await pilot.press("escape")
        with Client(autostart=False) as c:
            second = c.submit("sleep", {"seconds": 0.2})
        await wait_for(pilot, lambda: reqs.rows.get(second, {}).get("status") == "SUCCEEDED",
                       what="second request done")
        # Ages move on with no daemon event at all.
        age = reqs.table.get_row_at(0)[5]
        await pilot.pause(2.2)
        assert reqs.table.get_row_at(0)[5] != age, screen_text(app)


@pytest.mark.anyio
async def test_launch_form_hint_names_the_real_key(daemon: Path, tmp_path: Path) -> None:
    from skyd.errors import InvalidSpecError
    from skyd.tui.screens.launch import LaunchScreen, build_payload

    with pytest.raises(InvalidSpecError) as e:
        build_payload("", cluster="", gpus="", infra="", spot=False, num_nodes="", dryrun=True)
    keys = {b.key for b in LaunchScreen.BINDINGS}
    hint = e.value.hint or ""
    assert "ctrl+b" in hint and "ctrl+b" in keys, hint
