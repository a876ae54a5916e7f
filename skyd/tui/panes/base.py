"""TablePane: a titled DataTable whose rows come from one daemon read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.widgets import DataTable, Static

from skyd.errors import SkydError
from skyd.tui.client import TuiClient, Unavailable
from skyd.tui.table import Table

if TYPE_CHECKING:
    from skyd.tui.app import SkydApp


class TablePane(Vertical):
    """Subclasses set COLUMNS and usually override ``fetch`` / ``cells`` / ``key`` (the
    defaults show the list at SOURCE, one column per lower-cased key)."""

    DEFAULT_CSS = """
    TablePane { height: 1fr; }
    TablePane > .pane-caption { height: 1; padding: 0 1; color: $text-muted; }
    TablePane > DataTable { height: 1fr; }
    """
    COLUMNS: ClassVar[tuple[str, ...]] = ()
    UNAVAILABLE = "not available in this daemon"
    EMPTY = "nothing here yet"

    def __init__(self, *, id: str) -> None:  # noqa: A002 - Textual's name
        super().__init__(id=id)
        self.rows: dict[str, dict[str, Any]] = {}
        self.loaded = False
        self.available = True

    def compose(self) -> ComposeResult:
        yield Static("", classes="pane-caption")
        table = Table(cursor_type="row", zebra_stripes=True, cell_padding=1)
        yield table

    def on_mount(self) -> None:
        t = self.table
        for c in self.COLUMNS:
            t.add_column(c, key=c.lower())

    @property
    def skyd(self) -> SkydApp:
        from skyd.tui.app import SkydApp

        app = self.app
        assert isinstance(app, SkydApp)
        return app

    @property
    def client(self) -> TuiClient:
        return self.skyd.client

    @property
    def table(self) -> DataTable[str]:
        return self.query_one(DataTable)

    def caption(self, text: str) -> None:
        self.query_one(".pane-caption", Static).update(text)

    # -- overridable defaults -------------------------------------------------------------
    #: the daemon read a plain pane shows (a JSON list of row objects)
    SOURCE: ClassVar[str | None] = None

    async def fetch(self) -> list[dict[str, Any]] | None:
        """Rows to show; None = nothing to show (caption already says why). Default: the
        list at SOURCE."""
        if self.SOURCE is None:
            self.caption(self.UNAVAILABLE)
            return None
        return list(await self.client.optional_get(self.SOURCE) or [])

    def key(self, row: dict[str, Any]) -> str:
        return str(row.get("id"))

    def cells(self, row: dict[str, Any]) -> tuple[str, ...]:
        """One cell per column; default: the row's value under the column's lower-cased name."""
        return tuple("" if row.get(c.lower()) is None else str(row.get(c.lower()))
                     for c in self.COLUMNS)

    def describe(self, rows: list[dict[str, Any]]) -> str:
        return f"{len(rows)} rows" if rows else self.EMPTY

    # -- reload ---------------------------------------------------------------------------
    async def reload(self) -> None:
        try:
            await self._reload()
        except NoMatches:  # the app is closing: the pane's widgets went during the read
            pass

    async def _reload(self) -> None:
        try:
            rows = await self.fetch()
        except Unavailable:
            self.available = False
            self.caption(self.UNAVAILABLE)
            rows = []
        except SkydError as e:
            self.caption(f"error: {e}")
            return
        else:
            if rows is None:
                rows = []
            else:
                self.available = True
                self.caption(self.describe(rows))
        self.fill(rows)
        self.loaded = True

    def fill(self, rows: list[dict[str, Any]]) -> None:
        t = self.table
        current = self.selected_key()
        self.rows = {self.key(r): r for r in rows}
        t.clear()
        t.add_rows([self.cells(r) for r in rows])
        # add_rows assigns generated keys; re-key via our own mapping by index
        self._order = [self.key(r) for r in rows]
        if current in self.rows:
            t.move_cursor(row=self._order.index(current), animate=False)

    def selected_key(self) -> str | None:
        order: list[str] = getattr(self, "_order", [])
        t = self.table
        if not order or t.cursor_row is None or not 0 <= t.cursor_row < len(order):
            return None
        return order[t.cursor_row]

    def selected(self) -> dict[str, Any] | None:
        k = self.selected_key()
        return self.rows.get(k) if k is not None else None

    def row_index(self, key: str) -> int | None:
        order: list[str] = getattr(self, "_order", [])
        return order.index(key) if key in order else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter (or a click on the highlighted row): the pane's "open" action."""
        event.stop()
        self.open_selected()

    def open_selected(self) -> None:
        """Override: what enter does on a row."""

    def notify_error(self, e: BaseException) -> None:
        hint = getattr(e, "hint", None)
        self.app.notify(f"{e}" + (f"\nhint: {hint}" if hint else ""), severity="error", timeout=8)
