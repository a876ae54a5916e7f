"""Log viewer: follows a job's log or a request's events; search and pause.

Keys: p pause/resume (lines arriving while paused are buffered, not lost), / search,
n / N next / previous match, g / G top / bottom (G also re-enables auto-follow), escape back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Input, Log, Static

from skyd.errors import SkydError

Source = Callable[[], AsyncIterator[str]]
MAX_LINES = 200_000


class LogScreen(Screen[None]):
    DEFAULT_CSS = """
    LogScreen #log-title { height: 1; padding: 0 1; background: $boost; }
    LogScreen #log-status { height: 1; padding: 0 1; color: $text-muted; }
    LogScreen Log { height: 1fr; }
    LogScreen #log-search { display: none; }
    LogScreen #log-search.visible { display: block; }
    """
    BINDINGS = [
        Binding("escape,q", "close", "Back"),
        Binding("p", "pause", "Pause/resume"),
        Binding("slash", "search", "Search"),
        Binding("n", "next_match(1)", "Next"),
        Binding("N", "next_match(-1)", "Prev"),
        Binding("g", "top", "Top", show=False),
        Binding("G", "bottom", "Bottom/follow"),
    ]

    def __init__(self, title: str, source: Source) -> None:
        super().__init__()
        self.title_text = title
        self.source = source
        self.lines: list[str] = []
        self.pending: list[str] = []
        self.paused = False
        self.ended: str | None = None
        self.term = ""
        self.matches: list[int] = []
        self.match_pos = -1

    def compose(self) -> ComposeResult:
        yield Static(self.title_text, id="log-title")
        yield Log(max_lines=MAX_LINES, auto_scroll=True, id="log")
        yield Input(placeholder="search (enter: find, escape: close)", id="log-search")
        yield Static("following…", id="log-status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(Log).focus()
        self.run_worker(self._pump(), group="log", exclusive=True, exit_on_error=False)

    async def _pump(self) -> None:
        buf = ""
        try:
            async for text in self.source():
                buf += text
                *complete, buf = buf.split("\n")
                if complete:
                    self._add(complete)
            if buf:
                self._add([buf])
            self.ended = "end of log"
        except SkydError as e:
            self.ended = f"error: {e}"
        except OSError as e:
            self.ended = f"disconnected: {e}"
        self._status()

    def _add(self, lines: list[str]) -> None:
        if self.paused:
            self.pending.extend(lines)
        else:
            self._write(lines)
        self._status()

    def _write(self, lines: list[str]) -> None:
        start = len(self.lines)
        self.lines.extend(lines)
        if self.term:
            t = self.term.lower()
            self.matches.extend(start + i for i, ln in enumerate(lines) if t in ln.lower())
        self.query_one(Log).write_lines(lines)

    def _status(self) -> None:
        parts = [f"{len(self.lines)} lines"]
        if self.paused:
            parts.append(f"PAUSED (+{len(self.pending)} new)")
        if self.term:
            pos = f"{self.match_pos + 1}/" if self.match_pos >= 0 else ""
            parts.append(f"/{self.term}: {pos}{len(self.matches)} matches")
        parts.append(self.ended or "following")
        self.query_one("#log-status", Static).update(" · ".join(parts))

    # -- actions ----------------------------------------------------------------------
    def action_close(self) -> None:
        search = self.query_one("#log-search", Input)
        if search.has_class("visible"):
            search.remove_class("visible")
            self.query_one(Log).focus()
            return
        self.dismiss(None)

    def action_pause(self) -> None:
        self.paused = not self.paused
        log = self.query_one(Log)
        if self.paused:
            log.auto_scroll = False
        else:
            pending, self.pending = self.pending, []
            log.auto_scroll = True
            if pending:
                self._write(pending)
        self._status()

    def action_search(self) -> None:
        search = self.query_one("#log-search", Input)
        search.add_class("visible")
        search.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.set_search(event.value)
        event.input.remove_class("visible")
        self.query_one(Log).focus()

    def set_search(self, term: str) -> None:
        self.term = term.strip()
        t = self.term.lower()
        self.matches = [i for i, ln in enumerate(self.lines) if t and t in ln.lower()]
        self.match_pos = -1
        if self.matches:
            self.action_next_match(1)
        else:
            self._status()

    def action_next_match(self, step: int) -> None:
        if not self.matches:
            self._status()
            return
        self.match_pos = (self.match_pos + step) % len(self.matches)
        log = self.query_one(Log)
        log.auto_scroll = False
        log.scroll_to(y=max(0, self.matches[self.match_pos] - 2), animate=False)
        self._status()

    def action_top(self) -> None:
        log = self.query_one(Log)
        log.auto_scroll = False
        log.scroll_home(animate=False)

    def action_bottom(self) -> None:
        log = self.query_one(Log)
        log.auto_scroll = not self.paused
        log.scroll_end(animate=False)


def request_lines(ev: dict[str, Any]) -> str:
    """Text of one request event, as the viewer shows it."""
    from skyd.tui import fmt

    kind = ev.get("type")
    if kind in ("log", "job_log"):
        return str(ev.get("text") or "")
    if kind == "stage":
        return fmt.stage_line(ev) + "\n"
    if kind == "result":
        return f"== request {ev.get('status', 'SUCCEEDED')}\n"
    if kind == "error":
        err = ev.get("error") or {}
        hint = f"\nhint: {err['hint']}" if err.get("hint") else ""
        return f"== request {ev.get('status', 'FAILED')}: {err.get('message')}{hint}\n"
    if kind == "status":
        return f"== {ev.get('status')}\n"
    return ""
