"""Clusters: status, infra, resources, $/h, autostop, uptime; stop/start/down/autostop."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.binding import Binding
from textual.widgets import DataTable

from skyd.tui import fmt
from skyd.tui.panes.base import TablePane


class ClustersPane(TablePane):
    COLUMNS = ("Name", "Status", "Infra", "Resources", "$/h", "Autostop", "Uptime")
    EMPTY = "no clusters: press L to launch a task"
    BINDINGS = [
        Binding("enter", "jobs", "Jobs"),
        Binding("l", "logs", "Logs"),
        Binding("s", "stop", "Stop"),
        Binding("t", "start", "Start"),
        Binding("d", "down", "Down"),
        Binding("a", "autostop", "Autostop"),
    ]

    async def fetch(self) -> list[dict[str, Any]] | None:
        return list(await self.client.status())

    def key(self, row: dict[str, Any]) -> str:
        return str(row.get("name"))

    def cells(self, row: dict[str, Any]) -> tuple[str, ...]:
        return fmt.cluster_cells(row)

    def describe(self, rows: list[dict[str, Any]]) -> str:
        if not rows:
            return self.EMPTY
        up = sum(1 for r in rows if r.get("status") == "UP")
        total = sum(float(r.get("hourly_cost") or 0) for r in rows if r.get("status") == "UP")
        return f"{len(rows)} clusters, {up} up, {fmt.cost(total)}/h"

    def fill(self, rows: list[dict[str, Any]]) -> None:
        super().fill(rows)
        sel = self.selected_key()
        if sel is not None and self.skyd.selected_cluster != sel:
            self.skyd.selected_cluster = sel
        elif sel is None and rows:
            self.skyd.selected_cluster = self.key(rows[0])

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = self.selected_key()
        if key is not None:
            self.skyd.selected_cluster = key

    def _cluster(self) -> str | None:
        key = self.selected_key()
        if key is None:
            self.app.notify("no cluster selected", severity="warning")
        return key

    def action_jobs(self) -> None:
        if self._cluster() is not None:
            self.skyd.action_show("jobs")

    def action_logs(self) -> None:
        name = self._cluster()
        if name is not None:
            self.skyd.open_job_log(name, None)

    def action_stop(self) -> None:
        self._lifecycle("stop", "Stop")

    def action_start(self) -> None:
        self._lifecycle("start", "Start")

    def action_down(self) -> None:
        self._lifecycle("down", "Tear down")

    def _lifecycle(self, verb: str, title: str) -> None:
        name = self._cluster()
        if name is not None:
            extra = " Everything on it is deleted." if verb == "down" else ""
            self.skyd.confirm_and_submit(
                f"{title} cluster {name!r}?{extra}", verb, {"clusters": [name]}
            )

    @work(exclusive=True, group="autostop")
    async def action_autostop(self) -> None:
        from skyd.tui.screens.prompt import AutostopScreen

        name = self._cluster()
        if name is None:
            return
        row = self.rows.get(name) or {}
        answer = await self.app.push_screen_wait(
            AutostopScreen(name, row.get("autostop_minutes"), bool(row.get("autostop_down")))
        )
        if answer is None:
            return
        minutes, down = answer
        payload: dict[str, Any] = {"clusters": [name], "down": down}
        if minutes < 0:
            payload["cancel"] = True
        else:
            payload["idle_minutes"] = minutes
        await self.skyd.submit(verb="autostop", payload=payload)

    def open_selected(self) -> None:
        self.action_jobs()
