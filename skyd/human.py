"""Durations and idle minutes as people write them: ``4.2s``, ``4m 37s``, ``3h 05m``,
``30 days``, ``30 min``. Stdlib only; used by the CLI, the TUI and the daemon's messages."""

from __future__ import annotations


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'}"


def duration(seconds: float | None) -> str:
    """``0.4s`` and ``9.5s`` (tenths under 10 s), ``42s``, ``4m 37s``, ``3h 05m``,
    ``2 days 3h``, ``30 days``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = max(0.0, float(seconds))
    if s < 10:
        return f"{s:.1f}s"
    whole = int(s)
    if whole < 60:
        return f"{whole}s"
    m, sec = divmod(whole, 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h {m:02d}m"
    d, h = divmod(h, 24)
    return _plural(d, "day") + (f" {h}h" if h else "")


def minutes(value: float | None) -> str:
    """Idle minutes: ``30 min``, ``1.5 min``, ``2h 30m``, ``30 days``; ``-`` for None."""
    if value is None:
        return "-"
    m = float(value)
    if m < 60:
        return f"{m:g} min"
    if m % 1440 == 0:
        return _plural(int(m // 1440), "day")
    if m % 60 == 0 and m < 1440:
        return _plural(int(m // 60), "hour")
    return duration(m * 60)
