"""Managed jobs: status, recoveries, duration; cancel one."""

from __future__ import annotations

from typing import Any

from textual.binding import Binding

from skyd.tui import fmt
from skyd.tui.panes.base import TablePane


class ManagedPane(TablePane):
    COLUMNS = ("ID", "Name", "Status", "Recov", "Submitted", "Duration", "Cluster")
    EMPTY = "no managed jobs"
    UNAVAILABLE = "managed jobs are not available in this daemon (GET /v1/jobs missing)"
    BINDINGS = [
        Binding("c", "cancel", "Cancel"),
        Binding("enter,l", "logs", "Logs"),
    ]

    async def fetch(self) -> list[dict[str, Any]] | None:
        return await self.client.managed_jobs()

    def key(self, row: dict[str, Any]) -> str:
        return str(row.get("id", row.get("job_id")))

    def cells(self, row: dict[str, Any]) -> tuple[str, ...]:
        return fmt.managed_cells(row)

    def describe(self, rows: list[dict[str, Any]]) -> str:
        if not rows:
            return self.EMPTY
        active = sum(1 for r in rows if r.get("status") in ("PENDING", "STARTING", "RUNNING", "RECOVERING"))
        return f"{len(rows)} managed jobs, {active} active"

    def action_cancel(self) -> None:
        key = self.selected_key()
        if key is None:
            self.app.notify("no managed job selected", severity="warning")
            return
        self.skyd.confirm_and_submit(
            f"Cancel managed job {key}?", "jobs.cancel", {"ids": [int(key)]}
        )

    def action_logs(self) -> None:
        key = self.selected_key()
        if key is not None:
            self.skyd.open_managed_log(int(key))

    def open_selected(self) -> None:
        self.action_logs()
