"""Jobs on the selected cluster; cancel a job, open its log."""

from __future__ import annotations

from typing import Any

from textual.binding import Binding

from skyd.errors import SkydError
from skyd.tui import fmt
from skyd.tui.panes.base import TablePane


class JobsPane(TablePane):
    COLUMNS = ("ID", "Name", "Status", "Submitted", "Duration", "Exit")
    BINDINGS = [
        Binding("enter,l", "logs", "Logs"),
        Binding("c", "cancel", "Cancel job"),
    ]

    async def fetch(self) -> list[dict[str, Any]] | None:
        name = self.skyd.selected_cluster
        if not name:
            self.caption("select a cluster on the Clusters tab (1)")
            return None
        cl = self.skyd.cluster_row(name)
        if cl is None:
            self.caption(f"cluster {name!r} is gone")
            return None
        self.UNAVAILABLE = f"jobs on {name}: job queues are not available in this daemon"
        try:
            return await self.client.cluster_queue(name)
        except SkydError as e:
            self.caption(f"jobs on {name}: {e}")
            return None

    def key(self, row: dict[str, Any]) -> str:
        return str(row.get("job_id"))

    def cells(self, row: dict[str, Any]) -> tuple[str, ...]:
        return fmt.job_cells(row)

    def describe(self, rows: list[dict[str, Any]]) -> str:
        name = self.skyd.selected_cluster
        return f"jobs on {name}: {len(rows)}" if rows else f"no jobs on {name}"

    def action_logs(self) -> None:
        key = self.selected_key()
        name = self.skyd.selected_cluster
        if key is not None and name:
            self.skyd.open_job_log(name, int(key))

    def action_cancel(self) -> None:
        key = self.selected_key()
        name = self.skyd.selected_cluster
        if key is None or not name:
            self.app.notify("no job selected", severity="warning")
            return
        self.skyd.confirm_and_submit(
            f"Cancel job {key} on {name!r}?", "cancel",
            {"cluster_name": name, "job_ids": [int(key)], "all": False},
        )

    def open_selected(self) -> None:
        self.action_logs()
