"""Output helpers: ``-o json|table``, JSON documents and rich tables (rich imported lazily)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

Column = str | tuple[str, str | Callable[[dict[str, Any]], Any]]


def add_output_flag(p: argparse.ArgumentParser, default: str = "table") -> None:
    p.add_argument("-o", "--output", choices=("table", "json"), default=default,
                   help=f"output format (default: {default}); json prints one JSON document")


def print_json(obj: Any, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(json.dumps(obj, indent=2, default=str, ensure_ascii=False) + "\n")
    out.flush()


def _cell(row: dict[str, Any], col: Column) -> str:
    if isinstance(col, str):
        v = row.get(col.lower())
    else:
        key = col[1]
        v = key(row) if callable(key) else row.get(key)
    if v is None or v == "":
        return "-"
    return str(v)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], *,
                empty: str | None = None, stream: TextIO | None = None) -> None:
    """A rich table. ``columns``: header strings (row key = header.lower()) or
    ``(header, key)`` / ``(header, fn(row) -> value)``. ``empty``: message when no rows."""
    out = stream or sys.stdout
    if not rows and empty is not None:
        out.write(empty + "\n")
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    tty = out.isatty()
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
    for col in columns:
        table.add_column(col if isinstance(col, str) else col[0], no_wrap=not tty, overflow="fold")
    for row in rows:
        table.add_row(*(Text(_cell(row, c)) for c in columns))
    Console(file=out, soft_wrap=False, highlight=False, markup=False,
            width=None if tty else 4096).print(table)


def ago(ts: float | None, now: float | None = None) -> str:
    if not ts:
        return "-"
    d = (now or time.time()) - float(ts)
    if d < 60:
        return f"{int(d)}s ago"
    if d < 3600:
        return f"{int(d // 60)}m ago"
    if d < 86400:
        return f"{int(d // 3600)}h ago"
    return f"{int(d // 86400)}d ago"


def duration(seconds: float | None) -> str:
    """As people write it: ``4.2s``, ``4m 37s``, ``3h 05m``, ``30 days`` (skyd.human)."""
    from skyd.human import duration as human

    return human(seconds)
