"""The bounds of every number a user can give skyd, in one table (stdlib only).

The task models (``skyd.models``), the daemon's submit checks (HTTP API, and so the CLI and
the SDK, which send their flags there) and ``skyd validate`` all check numbers here, so a
count is refused the same way wherever it enters: exit 2 / HTTP 400 naming the field and
the range. The table is documented in docs/models.md ("Bounds of every number").

A number is a JSON/YAML number: ``true``/``false`` and strings are refused where only a
number makes sense, ``inf``/``nan`` never pass, a count is a whole number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from skyd.errors import InvalidSpecError


@dataclass(frozen=True)
class Bound:
    lo: float
    hi: float
    integer: bool = True
    lo_open: bool = False  # lo itself is refused (e.g. a timeout > 0)
    unit: str = ""
    why: str = ""

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        op = ">" if self.lo_open else ">="
        unit = f" {self.unit}" if self.unit else ""
        return f"{kind} {op} {self.lo:g} and <= {self.hi:g}{unit}"


DAY = 86_400
TEN_YEARS_S = 10 * 365 * DAY
MAX_REPLICAS = 1_000
MAX_POOL_WORKERS = 1_000

BOUNDS: dict[str, Bound] = {
    # ---- a task and its resources (per node)
    "num_nodes": Bound(1, 100_000, why="an infra's own limit is checked at plan time"),
    "cpus": Bound(0, 8_192, integer=False, lo_open=True, unit="vCPUs",
                  why="Linux's largest NR_CPUS (MAXSMP)"),
    "memory": Bound(0, 65_536, integer=False, lo_open=True, unit="GB",
                    why="64 TiB: above the largest machines sold (24-32 TB)"),
    "memory_per_cpu": Bound(0, 65_536, integer=False, lo_open=True, unit="GB per vCPU"),
    "accelerator_count": Bound(0, 1_024, integer=False, lo_open=True, unit="per node"),
    "disk_size": Bound(1, 65_536, unit="GB", why="64 TiB: the largest EBS/PD volume"),
    "ports": Bound(1, 1_000, unit="ports per task",
                   why="each port is a firewall rule / Service port / listener"),
    "port": Bound(1, 65_535),
    "priority": Bound(-1_000, 1_000),
    "max_hourly_cost": Bound(0, 1_000_000, integer=False, lo_open=True, unit="$/hour"),
    "idle_minutes": Bound(0, TEN_YEARS_S // 60, integer=False, unit="minutes"),
    "hook_timeout": Bound(1, DAY, unit="seconds"),
    "max_restarts_on_errors": Bound(0, 1_000),
    "exit_code": Bound(0, 255),
    "duration": Bound(0, TEN_YEARS_S, integer=False, unit="seconds"),
    "io_size": Bound(0, float(2**40), integer=False, unit="GB"),
    # ---- service
    "replicas": Bound(0, MAX_REPLICAS, why="each replica is a cluster"),
    "target_qps_per_replica": Bound(0, 1_000_000, integer=False, lo_open=True),
    "target_queue_length_per_replica": Bound(0, 1_000_000, integer=False, lo_open=True),
    "scale_delay_seconds": Bound(0, DAY, integer=False, unit="seconds"),
    "initial_delay_seconds": Bound(0, DAY, integer=False, unit="seconds"),
    "probe_timeout_seconds": Bound(0, 3_600, integer=False, lo_open=True, unit="seconds"),
    "probe_interval_seconds": Bound(0, 3_600, integer=False, lo_open=True, unit="seconds"),
    "failure_timeout_seconds": Bound(0, DAY, integer=False, unit="seconds"),
    "stream_timeout_seconds": Bound(0, DAY, integer=False, lo_open=True, unit="seconds"),
    "affinity_body_prefix": Bound(1, 1 << 20, unit="bytes"),
    # ---- pools and managed jobs
    "workers": Bound(0, MAX_POOL_WORKERS, why="each worker is a cluster"),
    "queue_length_threshold": Bound(0, 1_000_000),
    "num_jobs": Bound(1, 1_000, why="each job launches its own cluster"),
    # ---- reads and local commands
    "tail_lines": Bound(0, 1_000_000, unit="lines", why="0 = the whole log"),
    "connect_timeout": Bound(0, 3_600, integer=False, lo_open=True, unit="seconds"),
}


def problem(value: Any, key: str) -> str | None:
    """Why ``value`` is not a valid ``key`` number (see BOUNDS), or None."""
    b = BOUNDS[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be {b.describe()}, got {show(value)}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be {b.describe()}, got {show(value)}"
    if b.integer and isinstance(value, float) and not value.is_integer():
        return f"must be {b.describe()}, got {show(value)}"
    if value < b.lo or value > b.hi or (b.lo_open and value == b.lo):
        return f"must be {b.describe()}, got {show(value)}"
    return None


def show(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**12:
        return f"about 10^{len(str(abs(v))) - 1}"
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def normalize(value: Any, key: str) -> int | float:
    """A valid value, as an int when the bound is a count (``3.0`` -> 3)."""
    if BOUNDS[key].integer:
        return int(value)
    return value  # type: ignore[no-any-return]


def hint(key: str) -> str:
    b = BOUNDS[key]
    return f"give {b.describe()}" + (f" ({b.why})" if b.why else "")


def check(value: Any, key: str, field: str | None = None, *, optional: bool = True
          ) -> int | float | None:
    """``value`` checked against BOUNDS[key]: None (when optional) or the number;
    InvalidSpecError naming ``field`` (default: ``key``) otherwise."""
    if value is None and optional:
        return None
    why = problem(value, key)
    if why is not None:
        name = field or key
        raise InvalidSpecError(f"{name} {why}", field=name, hint=hint(key))
    return normalize(value, key)
