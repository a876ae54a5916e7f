"""SkydApp: tabs for clusters, jobs, managed jobs, services and requests, kept live by the
daemon's watch stream (GET /v1/watch); log viewer; launch; confirmed actions."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

import aiohttp
import anyio
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.reactive import reactive
from textual.widgets import Footer, Header, TabbedContent, TabPane

from skyd.errors import SkydError
from skyd.tui.client import TuiClient
from skyd.tui.live import PANES, Coalescer, panes_for
from skyd.tui.panes.base import TablePane
from skyd.tui.panes.clusters import ClustersPane
from skyd.tui.panes.jobs import JobsPane
from skyd.tui.panes.managed import ManagedPane
from skyd.tui.panes.requests import RequestsPane
from skyd.tui.panes.services import ServicesPane

TITLES = {"clusters": "1 Clusters", "jobs": "2 Jobs", "managed": "3 Managed jobs",
          "services": "4 Services", "requests": "5 Requests"}
PANE_CLASSES: dict[str, type[TablePane]] = {
    "clusters": ClustersPane, "jobs": JobsPane, "managed": ManagedPane,
    "services": ServicesPane, "requests": RequestsPane,
}


class SkydApp(App[None]):
    TITLE = "skyd"
    CSS = """
    TabbedContent { height: 1fr; }
    TabPane { padding: 0; }
    """
    BINDINGS = [
        Binding("1", "show('clusters')", "Clusters", show=False),
        Binding("2", "show('jobs')", "Jobs", show=False),
        Binding("3", "show('managed')", "Managed", show=False),
        Binding("4", "show('services')", "Services", show=False),
        Binding("5", "show('requests')", "Requests", show=False),
        Binding("L", "launch", "Launch"),
        Binding("r", "reload", "Reload", show=False),
        Binding("u", "all_users", "All users", show=False),
        Binding("q", "quit", "Quit"),
    ]

    selected_cluster: reactive[str | None] = reactive(None)

    def __init__(self, socket_path: str | None = None, *, exit_after_paint: bool = False,
                 start_dir: str | None = None, all_users: bool = False) -> None:
        super().__init__()
        self.client = TuiClient(socket_path)
        self.client.all_users = all_users
        self.exit_after_paint = exit_after_paint
        self.start_dir = start_dir
        self.t0 = time.perf_counter()
        self.painted_at: float | None = None
        self.painted_epoch: float | None = None
        self.connected = False
        self.events_seen = 0
        self.coalescer = Coalescer(self._reload, lambda fn: self.run_worker(fn(), group="reload"))

    # -- layout ---------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial="tab-clusters"):
            for name in PANES:
                with TabPane(TITLES[name], id=f"tab-{name}"):
                    yield PANE_CLASSES[name](id=name)
        yield Footer()

    def pane(self, name: str) -> TablePane:
        # The panes live on the default screen; a pushed screen (a log, the launch form) is
        # what ``self.query_one`` would search.
        stack = self.screen_stack
        return (stack[0] if stack else self).query_one(f"#{name}", TablePane)

    def on_mount(self) -> None:
        self.sub_title = f"connecting to {self.client.socket_path}"
        self.pane("clusters").table.focus()
        self.run_worker(self._watch(), group="watch", exclusive=True, exit_on_error=False)

    async def on_unmount(self) -> None:
        await self.client.close()

    # -- live updates ---------------------------------------------------------------------
    async def _watch(self) -> None:
        """Subscribe to the daemon's bus; re-read what each event invalidates. Reconnects
        with backoff when the daemon goes away (the header says so)."""
        backoff = 0.5
        while True:
            try:
                async for ev in self.client.watch():
                    topic = ev.get("topic")
                    if topic == "_hello":
                        self.connected, backoff = True, 0.5
                        self.sub_title = f"connected · {self.client.socket_path}"
                    else:
                        self.events_seen += 1
                    for name in panes_for(topic):
                        self.coalescer.poke(name)
            except (SkydError, aiohttp.ClientError, OSError) as e:
                self.sub_title = f"disconnected ({type(e).__name__}): retrying"
            self.connected = False
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    async def _reload(self, name: str) -> None:
        pane: TablePane | None = None
        # An event can arrive before the tabbed panes are mounted (a loaded machine): wait
        # for them rather than fail the worker (which would end the app).
        with anyio.move_on_after(10):
            while True:
                try:
                    pane = self.pane(name)
                    break
                except NoMatches:
                    await anyio.sleep(0.02)
        if pane is None:
            return
        await pane.reload()
        try:
            every_pane_loaded = all(self.pane(p).loaded for p in PANES)
        except NoMatches:  # the app is closing
            return
        if self.painted_at is None and every_pane_loaded:
            self.call_after_refresh(self._first_paint)

    def _first_paint(self) -> None:
        # DataTable sizes its columns on idle: the paint counts once that has happened.
        if any(getattr(self.pane(p).table, "_require_update_dimensions", False) for p in PANES):
            self.call_after_refresh(self._first_paint)
            return
        if self.painted_at is None:
            self.painted_at = time.perf_counter()
            self.painted_epoch = time.time()
            if self.exit_after_paint:
                self.exit()

    def watch_selected_cluster(self, old: str | None, new: str | None) -> None:
        if new != old:
            self.coalescer.poke("jobs")

    def cluster_row(self, name: str) -> dict[str, Any] | None:
        return self.pane("clusters").rows.get(name)

    # -- actions --------------------------------------------------------------------------
    def action_show(self, name: str) -> None:
        self.query_one(TabbedContent).active = f"tab-{name}"
        self.pane(name).table.focus()

    def action_reload(self) -> None:
        for name in PANES:
            self.coalescer.poke(name)

    def action_all_users(self) -> None:
        """Toggle every user's objects (a shared daemon) and the caller's own: the live
        stream is re-subscribed and every table re-read."""
        self.client.all_users = not self.client.all_users
        self.notify("every user's" if self.client.all_users else "your own")
        self.run_worker(self._watch(), group="watch", exclusive=True, exit_on_error=False)
        self.action_reload()

    def action_launch(self) -> None:
        from skyd.tui.screens.launch import LaunchScreen

        def launched(rid: str | None) -> None:
            if rid:
                self.action_show("requests")
                self.open_request_log(rid, title=f"launch {rid}")

        self.push_screen(LaunchScreen(self.start_dir), launched)

    async def submit(self, verb: str, payload: dict[str, Any]) -> str | None:
        try:
            rid = await self.client.submit(verb, payload)
        except SkydError as e:
            hint = f"\nhint: {e.hint}" if e.hint else ""
            self.notify(f"{verb}: {e}{hint}", severity="error", timeout=8)
            return None
        self.notify(f"{verb} submitted (request {rid})")
        return rid

    def confirm(self, message: str, then: Callable[[], Awaitable[Any]]) -> None:
        from skyd.tui.screens.confirm import ConfirmScreen

        async def answered(yes: bool | None) -> None:
            if yes:
                await then()

        self.push_screen(ConfirmScreen(message), answered)

    def confirm_and_submit(self, message: str, verb: str, payload: dict[str, Any]) -> None:
        self.confirm(message, lambda: self.submit(verb, payload))

    def confirm_and_cancel_request(self, rid: str) -> None:
        async def cancel() -> None:
            try:
                out = await self.client.requests_cancel(rid)
                self.notify(f"request {rid}: {out.get('status')}")
            except SkydError as e:
                self.notify(str(e), severity="error")

        self.confirm(f"Cancel request {rid}?", cancel)

    # -- log viewer -----------------------------------------------------------------------
    def open_job_log(self, cluster: str, job_id: int | None) -> None:
        from skyd.tui.screens.logs import LogScreen

        async def source() -> AsyncIterator[str]:
            if job_id is None:
                stream = self.client.stream_bytes(f"/v1/clusters/{quote(cluster, safe='')}/logs",
                                                  {"follow": 1})
            else:
                stream = self.client.job_log(cluster, job_id)
            async for chunk in stream:
                yield chunk.decode(errors="replace")

        which = f"job {job_id}" if job_id is not None else "latest job"
        self.push_screen(LogScreen(f"{cluster}: {which}", source))

    def open_managed_log(self, job_id: int) -> None:
        """GET /v1/jobs/{id}/logs: ndjson {"text"} lines, across recoveries."""
        from skyd.tui.screens.logs import LogScreen

        async def source() -> AsyncIterator[str]:
            async for ev in self.client.stream_ndjson(f"/v1/jobs/{quote(str(job_id), safe='')}/logs", {"follow": 1}):
                yield str(ev.get("text") or "")

        self.push_screen(LogScreen(f"managed job {job_id}", source))

    def open_request_log(self, rid: str, title: str | None = None) -> None:
        from skyd.tui.screens.logs import LogScreen, request_lines

        async def source() -> AsyncIterator[str]:
            async for ev in self.client.stream(rid):
                yield request_lines(ev)

        self.push_screen(LogScreen(title or f"request {rid}", source))


def run(socket_path: str | None = None, *, exit_after_paint: bool = False,
        all_users: bool = False) -> int:
    import sys

    app = SkydApp(socket_path, exit_after_paint=exit_after_paint, all_users=all_users)
    # The benchmark runs without a terminal: render headless (same compositor work).
    app.run(headless=exit_after_paint and not sys.stdout.isatty())
    if exit_after_paint and app.painted_at is not None:
        print(f"first full paint after {(app.painted_at - app.t0) * 1000:.0f} ms "
              f"(epoch {app.painted_epoch})")
    return 0
