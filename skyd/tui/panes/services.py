"""Services and their replicas (GET /v1/services when serve lands); take one down."""

from __future__ import annotations

from typing import Any

from textual.binding import Binding

from skyd.tui.panes.base import TablePane


class ServicesPane(TablePane):
    COLUMNS = ("Name", "Status", "Replicas", "Endpoint", "Version")
    EMPTY = "no services"
    UNAVAILABLE = "services (skyd serve) are not available in this daemon yet"
    BINDINGS = [Binding("d", "down", "Down service")]

    async def fetch(self) -> list[dict[str, Any]] | None:
        return await self.client.services()

    def key(self, row: dict[str, Any]) -> str:
        return str(row.get("name"))

    def cells(self, row: dict[str, Any]) -> tuple[str, ...]:
        reps = row.get("replicas") or []
        if isinstance(reps, list):
            ready = sum(1 for r in reps if r.get("status") == "READY")
            rep = f"{ready}/{len(reps)} ready"
        else:
            rep = str(reps)
        return (str(row.get("name")), str(row.get("status") or "-"), rep,
                str(row.get("endpoint") or "-"), str(row.get("version") or "-"))

    def action_down(self) -> None:
        if not self.available:
            self.app.notify(self.UNAVAILABLE, severity="warning")
            return
        key = self.selected_key()
        if key is None:
            self.app.notify("no service selected", severity="warning")
            return
        self.skyd.confirm_and_submit(
            f"Take service {key!r} down (all replicas terminated)?", "serve.down",
            {"service_names": [key]},
        )
