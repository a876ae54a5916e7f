"""The TUI's table shows whole cells on the first paint after its columns are measured."""

from __future__ import annotations

import pytest
from textual import events
from textual.app import App, ComposeResult

from skyd.tui.table import Table
from tests.support.tui import screen_text

COLS = ("Name", "Status", "Infra", "Resources")
ROWS = [("dev-box", "STOPPED", "local", "1x -"),
        ("train-a100", "UP", "aws/us-east-1", "1x p4d.24xlarge {A100:8}")]


class One(App[None]):
    CSS = "Table { height: 1fr; }"  # as in the panes: the rows' space is laid out already

    def compose(self) -> ComposeResult:
        yield Table(cursor_type="row")


@pytest.mark.anyio
async def test_rows_painted_before_the_measure_repaint_whole_after_it() -> None:
    app = One()
    async with app.run_test(size=(80, 10)) as pilot:
        t = app.query_one(Table)
        for c in COLS:
            t.add_column(c, key=c.lower())
        await pilot.pause()
        t.add_rows(ROWS)
        assert "train-a100" not in screen_text(app)  # painted before the measure
        await t._on_idle(events.Idle())  # the measure Textual runs when the table is idle
        text = screen_text(app)  # no layout pass, no Resize in between
        assert "train-a100" in text and "1x p4d.24xlarge {A100:8}" in text, text
