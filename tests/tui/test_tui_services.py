"""The TUI's services pane against a real daemon serving a real replica: the service and
its replicas appear, and the request rate moves while traffic flows, pushed by the
daemon's watch stream (no key pressed)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from skyd.tui.app import SkydApp
from skyd.tui.screens.confirm import ConfirmScreen
from tests.serve.test_serve_e2e import PROBE, _ready, _up, _yaml
from tests.support.daemon import cli, running_daemon
from tests.support.tui import screen_text, wait_for


@pytest.fixture
def serving(skyd_home: Path, tmp_path: Path) -> Iterator[dict[str, Any]]:
    with running_daemon():
        out = _up(_yaml(tmp_path, "tuisvc", PROBE + "  replicas: 2\n"))
        try:
            _ready("tuisvc", 2)
            yield out
        finally:
            cli("serve", "down", "-a")


def _traffic(url: str, n: int) -> None:
    for _ in range(n):
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()


@pytest.mark.anyio
async def test_services_pane_shows_replicas_and_live_rates(serving: dict[str, Any]) -> None:
    app = SkydApp()
    async with app.run_test(size=(140, 30)) as pilot:
        await wait_for(pilot, lambda: app.painted_at is not None, timeout=30, what="first paint")
        await pilot.press("4")
        pane = app.pane("services")
        await wait_for(pilot, lambda: "tuisvc/2" in pane.rows, timeout=30,
                       what="replica rows")
        text = screen_text(app)
        for s in ("tuisvc", "READY", "2/2 ready", "└ replica 1", "└ replica 2",
                  "1 services, 1 ready", serving["endpoint"]):
            assert s in text, f"{s!r} not on screen:\n{text}"
        url = serving["endpoint"] + "/"
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, _traffic, url, 400)

            def moving() -> bool:
                r = pane.rows.get("tuisvc") or {}
                return bool(r.get("_rate")) and any(
                    (pane.rows.get(f"tuisvc/{i}") or {}).get("_rate") for i in (1, 2))

            await wait_for(pilot, moving, timeout=30, what="live request rate")
        assert pane.rows["tuisvc"]["load_balancer"]["requests"] >= 1
        await pilot.press("down")  # on a replica row, `d` still names its service
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirm")
        assert "tuisvc" in screen_text(app)
        await pilot.press("escape")
