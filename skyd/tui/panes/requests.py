"""Requests: what is in flight, with its live stage (followed from the request's events)."""

from __future__ import annotations

from typing import Any

from textual.binding import Binding
from textual.coordinate import Coordinate

from skyd.errors import SkydError
from skyd.tui import fmt
from skyd.tui.panes.base import TablePane

MAX_FOLLOWERS = 8
STAGE_COL = 3
AGE_COL = 5
TICK_S = 1.0


class RequestsPane(TablePane):
    COLUMNS = ("ID", "Verb", "Status", "Stage", "Cluster", "Age")
    EMPTY = "no requests yet"
    BINDINGS = [
        Binding("enter,l", "logs", "Follow"),
        Binding("c", "cancel", "Cancel request"),
    ]

    def __init__(self, *, id: str) -> None:  # noqa: A002
        super().__init__(id=id)
        self.stages: dict[str, str] = {}
        self._following: set[str] = set()

    def on_mount(self) -> None:
        # (Textual runs TablePane.on_mount too: handlers run for every class in the MRO.)
        # Ages and durations move on between daemon events: re-render them locally each
        # second (no daemon call), so the tab stays live while nothing is published.
        self.set_interval(TICK_S, self.tick)

    def tick(self) -> None:
        for idx, key in enumerate(getattr(self, "_order", [])):
            row = self.rows.get(key)
            if row is not None and idx < self.table.row_count:
                self.table.update_cell_at(Coordinate(idx, AGE_COL), self.cells(row)[AGE_COL])

    async def fetch(self) -> list[dict[str, Any]] | None:
        return list(await self.client.requests_ls(limit=200))

    def cells(self, row: dict[str, Any]) -> tuple[str, ...]:
        return fmt.request_cells(row, self.stages.get(str(row.get("id")), ""))

    def describe(self, rows: list[dict[str, Any]]) -> str:
        live = sum(1 for r in rows if r.get("status") in ("PENDING", "RUNNING"))
        return f"{len(rows)} requests, {live} in flight" if rows else self.EMPTY

    def fill(self, rows: list[dict[str, Any]]) -> None:
        super().fill(rows)
        for r in rows:
            rid = str(r.get("id"))
            if (r.get("status") in ("PENDING", "RUNNING") and rid not in self._following
                    and len(self._following) < MAX_FOLLOWERS):
                self._following.add(rid)
                self.run_worker(self._follow(rid), group="follow", exit_on_error=False)

    async def _follow(self, rid: str) -> None:
        """Track the request's current stage from its event stream (ends at its result)."""
        stages: list[dict[str, Any]] = []
        try:
            async for ev in self.client.stream(rid):
                if ev.get("type") == "stage":
                    stages = [s for s in stages if s.get("name") != ev.get("name")] + [ev]
                    self._set_stage(rid, fmt.stage_text(stages))
        except SkydError:
            pass
        finally:
            self._following.discard(rid)

    def _set_stage(self, rid: str, text: str) -> None:
        self.stages[rid] = text
        idx = self.row_index(rid)
        if idx is not None:
            self.table.update_cell_at(Coordinate(idx, STAGE_COL), text)

    def action_logs(self) -> None:
        key = self.selected_key()
        if key is not None:
            self.skyd.open_request_log(key)

    def action_cancel(self) -> None:
        key = self.selected_key()
        if key is None:
            return
        row = self.rows.get(key) or {}
        if row.get("status") not in ("PENDING", "RUNNING"):
            self.app.notify(f"request {key} already {row.get('status')}", severity="warning")
            return
        self.skyd.confirm_and_cancel_request(key)

    def open_selected(self) -> None:
        self.action_logs()
