"""Table: Textual's DataTable, repainted as soon as its columns are measured."""

from __future__ import annotations

from collections.abc import Iterable

from textual.widgets import DataTable
from textual.widgets.data_table import RowKey


class Table(DataTable[str]):
    """DataTable measures its columns when idle, after new rows may already have been
    painted at the header's widths. Its line caches are keyed on an update count that the
    measure does not bump; only the Resize that follows on the next layout does. Until then
    every repaint (a screenshot, a first-paint timestamp) shows the rows cut to the
    headers' widths. Bumping the count with the measure makes the next paint the measured
    one."""

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        super()._update_dimensions(new_rows)
        self._update_count += 1
        self.refresh()
