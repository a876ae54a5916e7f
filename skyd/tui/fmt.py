"""Pure formatting of daemon rows for tables (no Textual imports; unit-testable)."""

from __future__ import annotations

import time
from typing import Any


def duration(seconds: float | None) -> str:
    """``3s``, ``4m 05s``, ``2h 03m``, ``3d 4h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m {s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h {m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d {h}h"


def since(ts: float | None, now: float | None = None) -> str:
    if not ts:
        return "-"
    return duration((now or time.time()) - float(ts))


def span(start: float | None, end: float | None, now: float | None = None) -> str:
    """Duration from ``start`` to ``end`` (or now while it runs)."""
    if not start:
        return "-"
    return duration((float(end) if end else (now or time.time())) - float(start))


def accelerators(acc: Any) -> str:
    if not acc:
        return ""
    if isinstance(acc, dict):
        return ",".join(f"{k}:{v}" for k, v in acc.items())
    return str(acc)


def resources(row: dict[str, Any]) -> str:
    """``2x m5.xlarge {A100:8}`` / ``1x (local)``."""
    n = row.get("num_nodes") or 1
    itype = row.get("instance_type") or ""
    acc = accelerators(row.get("accelerators"))
    spot = " [spot]" if row.get("use_spot") else ""
    inner = " ".join(p for p in (itype, f"{{{acc}}}" if acc else "") if p) or "-"
    return f"{n}x {inner}{spot}"


def infra(row: dict[str, Any]) -> str:
    if row.get("infra"):
        return str(row["infra"])
    return "/".join(str(p) for p in (row.get("cloud"), row.get("region"), row.get("zone")) if p) or "-"


def cost(hourly: Any) -> str:
    try:
        v = float(hourly or 0.0)
    except (TypeError, ValueError):
        return "-"
    return f"${v:,.2f}" if v >= 0.01 or v == 0 else f"${v:.4f}"


def autostop(row: dict[str, Any]) -> str:
    m = row.get("autostop_minutes")
    if m is None or m < 0:
        return "-"
    from skyd.human import minutes

    return f"{minutes(m)}{' down' if row.get('autostop_down') else ''}"


def cluster_cells(row: dict[str, Any], now: float | None = None) -> tuple[str, ...]:
    """NAME STATUS INFRA RESOURCES $/H AUTOSTOP UPTIME"""
    return (
        str(row.get("name")), str(row.get("status") or "-"), infra(row), resources(row),
        cost(row.get("hourly_cost")), autostop(row), since(row.get("launched_at"), now),
    )


def job_cells(row: dict[str, Any], now: float | None = None) -> tuple[str, ...]:
    """ID NAME STATUS SUBMITTED DURATION EXIT"""
    code = row.get("exit_code")
    return (
        str(row.get("job_id", row.get("id", "?"))), str(row.get("name") or "-"),
        str(row.get("status") or "-"), since(row.get("submitted_at"), now),
        span(row.get("started_at"), row.get("ended_at"), now), "-" if code is None else str(code),
    )


def managed_cells(row: dict[str, Any], now: float | None = None) -> tuple[str, ...]:
    """ID NAME STATUS RECOVERIES SUBMITTED DURATION CLUSTER"""
    return (
        str(row.get("id", row.get("job_id", "?"))), str(row.get("name") or "-"),
        str(row.get("status") or "-"), str(row.get("recoveries") or 0),
        since(row.get("submitted_at"), now), span(row.get("started_at"), row.get("ended_at"), now),
        str(row.get("cluster") or "-"),
    )


def request_cells(row: dict[str, Any], stage: str = "", now: float | None = None) -> tuple[str, ...]:
    """ID VERB STATUS STAGE CLUSTER AGE"""
    return (
        str(row.get("id")), str(row.get("verb")), str(row.get("status")), stage or "-",
        str(row.get("cluster_name") or "-"), since(row.get("created_at"), now),
    )


def stage_text(stages: list[dict[str, Any]]) -> str:
    """``PROVISION …`` for the running stage, else the last finished one."""
    if not stages:
        return ""
    last = stages[-1]
    mark = {"start": "…", "done": "✓", "failed": "✗", "skipped": "-"}.get(str(last.get("state")), "")
    return f"{last.get('name')} {mark}".strip()


def stage_line(ev: dict[str, Any]) -> str:
    el = ev.get("elapsed")
    t = f" ({el:.1f}s)" if isinstance(el, int | float) else ""
    return f"== {ev.get('name')} {ev.get('state')}{t}"
