"""Services with their replicas under them and live request rates; take one down.

Rates: the daemon's service view carries the load balancer's counters (requests served in
total, per replica, and in flight); the pane turns the change between two reads into
requests per second. The controller publishes a `serve` event each second its load
balancer served something, so the pane re-reads while traffic flows, and never polls.
"""

from __future__ import annotations

import time
from typing import Any

from textual.binding import Binding

from skyd.tui.panes.base import TablePane


def _rate(prev: tuple[float, int] | None, now: float, count: int) -> float | None:
    if prev is None or now <= prev[0] or count < prev[1]:
        return None
    return (count - prev[1]) / (now - prev[0])


def _fmt_rate(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


class ServicesPane(TablePane):
    COLUMNS = ("Name", "Status", "Replicas", "Req/s", "QPS 60s", "In-flight", "Endpoint", "Ver")
    EMPTY = "no services"
    UNAVAILABLE = "services (skyd serve) are not available in this daemon"
    BINDINGS = [Binding("d", "down", "Down service")]

    def __init__(self, *, id: str) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self._seen: dict[str, tuple[float, int]] = {}  # row key -> (time, served count)

    async def fetch(self) -> list[dict[str, Any]] | None:
        services = await self.client.services()
        now = time.monotonic()
        rows: list[dict[str, Any]] = []
        seen: dict[str, tuple[float, int]] = {}
        for s in services:
            lb = s.get("load_balancer") or {}
            name = str(s.get("name"))
            total = int(lb.get("requests") or 0)
            rate = _rate(self._seen.get(name), now, total)
            seen[name] = (now, total)
            inflight = lb.get("inflight") or {}
            served = lb.get("served") or {}
            rows.append({**s, "_kind": "service", "_rate": rate, "_key": name,
                         "_inflight": sum(int(v) for v in inflight.values())})
            for r in s.get("replicas") or []:
                rid = str(r.get("replica_id"))
                key = f"{name}/{rid}"
                n = served.get(rid, served.get(int(rid) if rid.isdigit() else rid))
                rrate = _rate(self._seen.get(key), now, int(n)) if n is not None else None
                if n is not None:
                    seen[key] = (now, int(n))
                fl = inflight.get(rid, inflight.get(int(rid) if rid.isdigit() else rid))
                rows.append({**r, "_kind": "replica", "_service": name, "_key": key,
                             "_rate": rrate, "_inflight": fl})
        self._seen = seen
        return rows

    def key(self, row: dict[str, Any]) -> str:
        return str(row.get("_key") or row.get("name"))

    def cells(self, row: dict[str, Any]) -> tuple[str, ...]:
        if row.get("_kind") == "replica":
            infra = "/".join(p for p in (row.get("cloud"), row.get("region"), row.get("zone")) if p)
            if row.get("use_spot"):
                infra += " spot"
            fl = row.get("_inflight")
            return (f"  └ replica {row.get('replica_id')}", str(row.get("status") or "-"),
                    infra or "-", _fmt_rate(row.get("_rate")), "", "-" if fl is None else str(fl),
                    str(row.get("url") or "-"), str(row.get("version") or "-"))
        reps = row.get("replicas") or []
        ready = sum(1 for r in reps if r.get("status") == "READY")
        lb = row.get("load_balancer") or {}
        qps = lb.get("qps")
        return (str(row.get("name")), str(row.get("status") or "-"), f"{ready}/{len(reps)} ready",
                _fmt_rate(row.get("_rate")), "-" if qps is None else f"{float(qps):.2f}",
                str(row.get("_inflight", 0)), str(row.get("endpoint") or "-"),
                str(row.get("version") or "-"))

    def describe(self, rows: list[dict[str, Any]]) -> str:
        services = [r for r in rows if r.get("_kind") == "service"]
        if not services:
            return self.EMPTY
        ready = sum(1 for r in services if r.get("status") == "READY")
        return f"{len(services)} services, {ready} ready"

    def selected_service(self) -> str | None:
        row = self.selected()
        if row is None:
            return None
        return str(row.get("_service") or row.get("name"))

    def action_down(self) -> None:
        if not self.available:
            self.app.notify(self.UNAVAILABLE, severity="warning")
            return
        name = self.selected_service()
        if name is None:
            self.app.notify("no service selected", severity="warning")
            return
        self.skyd.confirm_and_submit(
            f"Take service {name!r} down (all replicas terminated)?", "serve.down",
            {"names": [name]},
        )
