"""End to end through the TUI on the `local` infra: launch a task, see it SUCCEEDED, open
its logs, down the cluster. Skipped (with the daemon's reason) while launch does not work."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyd.daemon.plugins import PLUGIN_MODULES
from skyd.sdk.transport import Client
from skyd.tui.app import SkydApp
from skyd.tui.screens.confirm import ConfirmScreen
from skyd.tui.screens.launch import LaunchScreen
from skyd.tui.screens.logs import LogScreen
from tests.support.tui import start_daemon, stop_daemon, wait_for

TASK = "name: tui-e2e\nresources:\n  infra: local\nrun: echo hello-from-tui\n"


@pytest.fixture
def local_daemon(skyd_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("SKYD_NO_AUTOSTART", "1")
    if "skyd.pipeline.verbs" not in PLUGIN_MODULES:
        monkeypatch.setenv("SKYD_EXTRA_PLUGINS", "skyd.pipeline.verbs")
    start_daemon()
    try:
        with Client(autostart=False) as c:
            rid = c.submit("launch", {"yaml": TASK, "dryrun": True, "base_dir": str(skyd_home)})
            err = [e for e in c.events(rid) if e.get("type") == "error"]
        # A local launch that cannot even be planned is a failure of the code under test.
        assert not err, f"a dry run on local failed: {err[0]['error'].get('message')}"
        yield skyd_home
    finally:
        stop_daemon()


@pytest.mark.anyio
async def test_launch_logs_down_through_the_tui(local_daemon: Path, tmp_path: Path) -> None:
    y = tmp_path / "task.yaml"
    y.write_text(TASK)
    app = SkydApp(start_dir=str(tmp_path))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.painted_at is not None, what="first paint")
        await pilot.press("L")
        assert isinstance(app.screen, LaunchScreen)
        launch = app.screen
        launch.query_one("#path").value = str(y)  # type: ignore[attr-defined]
        launch.query_one("#cluster").value = "tui-e2e"  # type: ignore[attr-defined]
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: launch.plan is not None, timeout=30, what="dry-run plan")
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirm")
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, LogScreen), what="request log")
        log = app.screen
        assert isinstance(log, LogScreen)
        await wait_for(pilot, lambda: log.ended is not None, timeout=90, what="launch done")
        assert "== request SUCCEEDED" in log.lines, log.lines[-20:]
        assert any(ln.startswith("== PROVISION") for ln in log.lines)
        await pilot.press("escape", "1")
        clusters = app.pane("clusters")
        await wait_for(pilot, lambda: (clusters.rows.get("tui-e2e") or {}).get("status") == "UP",
                       what="cluster UP")
        while clusters.selected_key() != "tui-e2e":
            await pilot.press("down")
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(app.screen, LogScreen), what="job log")
        jlog = app.screen
        assert isinstance(jlog, LogScreen)
        await wait_for(pilot, lambda: any("hello-from-tui" in ln for ln in jlog.lines),
                       timeout=30, what="job output")
        from skyd import paths
        from skyd.clouds.local_procs import agents_on

        node = paths.sandboxes_dir() / "tui-e2e" / "node-0"
        assert agents_on(node), f"no agent runs for {node}"  # what the check below looks for
        await pilot.press("escape", "d")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirm down")
        await pilot.press("y")
        await wait_for(pilot, lambda: "tui-e2e" not in clusters.rows, timeout=60, what="down")
        # `down` leaves no agent of the cluster running (one was once seen orphaned here)
        await wait_for(pilot, lambda: not agents_on(node), timeout=10, what="the agent gone")
    _ = os
