"""Small value parsers shared by the models: infra, cpus/memory, sizes, ports, durations.

Each raises ``ValueError``-family errors through :func:`skyd.models._errors.fail`, so they
can run inside pydantic validators and still produce a field path.
"""

from __future__ import annotations

import math
import re
from typing import Any

from skyd import bounds
from skyd.cloudnames import REGISTERED
from skyd.models._errors import fail, suggest

# SkyPilot's constants.ALL_CLOUDS plus the providers skyd adds. Lower-case.
KNOWN_CLOUDS: tuple[str, ...] = (
    "aws", "azure", "gcp", "ibm", "lambda", "scp", "oci", "kubernetes", "runpod", "vast",
    "vsphere", "cudo", "fluidstack", "paperspace", "do", "nebius", "ssh", "hyperbolic",
    "seeweb", "shadeform", "primeintellect", "coreweave", "slurm", "local", "vultr",
    "hotaisle", "crusoe", "tensorwave", "cloudrift", "together", "verda", "mithril",
    "amddevcloud",
)
CLOUD_ALIASES: dict[str, str] = {
    "k8s": "kubernetes",
    "digitalocean": "do",
    "amd-dev-cloud": "amddevcloud",  # its own provider (skyd.clouds.do serves both APIs)
    "amd_dev_cloud": "amddevcloud",
    "lambdalabs": "lambda",
    "lambda-cloud": "lambda",
    "hot-aisle": "hotaisle",
    "hot_aisle": "hotaisle",
}


def canonical_cloud(name: str) -> str:
    n = name.strip().lower()
    n = CLOUD_ALIASES.get(n, n)
    if n not in KNOWN_CLOUDS and n not in REGISTERED:
        s = suggest(n, list(KNOWN_CLOUDS) + list(CLOUD_ALIASES))
        hint = f"did you mean '{s}'?" if s else f"known clouds: {', '.join(KNOWN_CLOUDS)}"
        fail(f"unknown cloud '{name}'", hint)
    return n


def parse_infra(infra: str) -> tuple[str | None, str | None, str | None]:
    """``aws/us-east-1/us-east-1a`` -> (cloud, region, zone); ``*`` means any.

    ``k8s/<context>`` and ``kubernetes/<context>`` keep the whole rest (contexts may contain
    slashes) as the region; ``ssh/<pool>`` uses the pool as the region.
    """
    if not isinstance(infra, str) or not infra.strip():
        fail("infra must be a non-empty string like 'aws/us-east-1'")
    s = infra.strip()
    head, _, rest = s.partition("/")
    if head == "*":
        cloud = None
    else:
        cloud = canonical_cloud(head)
    if cloud in ("kubernetes", "ssh", "slurm", "local"):
        region = rest or None
        if cloud == "local" and region:
            fail(f"infra 'local' takes no region, got {infra!r}", "write just 'local'")
        if cloud == "slurm" and region and "/" in region:  # slurm/<cluster>/<partition>
            cl, _, part = region.partition("/")
            if not cl or not part or "/" in part:
                fail(f"malformed infra {infra!r}", "use slurm[/<cluster>[/<partition>]]")
            return cloud, cl, part
        return cloud, region, None
    parts = rest.split("/") if rest else []
    if len(parts) > 2 or any(p == "" for p in parts):
        fail(f"malformed infra {infra!r}",
             "use cloud[/region[/zone]], e.g. 'aws', 'aws/us-east-1', '*/us-east-1'")
    region = parts[0] if parts else None
    zone = parts[1] if len(parts) > 1 else None
    region = None if region == "*" else region
    zone = None if zone == "*" else zone
    return cloud, region, zone


def format_infra(cloud: str | None, region: str | None, zone: str | None) -> str | None:
    if cloud is None and region is None and zone is None:
        return None
    parts = [cloud or "*"]
    if region is not None or zone is not None:
        parts.append(region or "*")
    if zone is not None:
        parts.append(zone)
    return "/".join(parts)


def _fmt_num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


_MEM_UNITS = {"": 1.0, "b": 1 / 2**30, "k": 1 / 2**20, "kb": 1 / 2**20, "ki": 1 / 2**20,
              "kib": 1 / 2**20, "m": 1 / 1024, "mb": 1 / 1024, "mi": 1 / 1024, "mib": 1 / 1024,
              "g": 1.0, "gb": 1.0, "gi": 1.0, "gib": 1.0, "t": 1024.0, "tb": 1024.0,
              "ti": 1024.0, "tib": 1024.0, "p": 1024.0**2, "pb": 1024.0**2, "pi": 1024.0**2}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def size_to_gib(value: Any, what: str) -> float:
    """``100`` / ``"100"`` / ``"100GB"`` / ``"1TB"`` / ``"512MB"`` -> GiB (no unit = GB)."""
    if isinstance(value, bool):
        fail(f"{what} must be a size, got {value!r}", "e.g. 256 or '256GB'")
    if isinstance(value, int | float):
        return _bounded(float(value), value, what, MAX_SIZE_GIB)
    if not isinstance(value, str):
        fail(f"{what} must be a size, got {type(value).__name__}", "e.g. 256 or '256GB'")
    s = value.strip()
    neg = s.startswith("-")
    m = _SIZE_RE.match(s.lstrip("-"))
    if not m or m.group(2).lower() not in _MEM_UNITS:
        fail(f"bad {what} {value!r}", "write a number of GB or a size like '100GB' or '1TB'")
    v = float(m.group(1)) * _MEM_UNITS[m.group(2).lower()]
    return _bounded(-v if neg else v, value, what, MAX_SIZE_GIB)


MAX_SIZE_GIB = bounds.BOUNDS["io_size"].hi  # 2^40 GB: anything bigger is a typo
MAX_DURATION_S = bounds.TEN_YEARS_S


def _bounded(v: float, raw: Any, what: str, hi: float) -> float:
    """Reject inf/NaN and absurd magnitudes where a number enters (e.g. ``1e999``)."""
    if not math.isfinite(v) or abs(v) > hi:
        fail(f"{what} {raw!r} is out of range", f"give a finite value of at most {hi:g}")
    return v


def _in_table(x: float, key: str, what: str, raw: Any) -> None:
    """``x`` (already parsed from ``raw``) within skyd.bounds.BOUNDS[key]."""
    b = bounds.BOUNDS[key]
    if not b.lo <= x <= b.hi or (b.lo_open and x == b.lo):
        shown = raw if isinstance(raw, str) else bounds.show(raw)
        fail(f"{what} must be at most {b.hi:g} {b.unit}".rstrip() + f", got {shown}",
             bounds.hint(key))


def parse_cpus(value: Any) -> str:
    """``4`` / ``"4"`` -> "4"; ``"4+"`` -> "4+"; ``0.5`` -> "0.5"."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        fail(f"cpus must be a number or a string like '4+', got {value!r}")
    s = str(value).strip()
    plus = s.endswith("+")
    num = s[:-1] if plus else s
    try:
        x = float(num)
    except ValueError:
        fail(f"bad cpus {value!r}", "write a number of vCPUs, optionally with '+' (at least), e.g. '4+'")
    if not x > 0 or math.isinf(x):
        fail(f"cpus must be positive, got {value!r}")
    _in_table(x, "cpus", "cpus", value)
    return _fmt_num(x) + ("+" if plus else "")


def parse_memory(value: Any) -> str:
    """``32`` -> "32"; ``"32+"`` / ``"32GB+"`` -> "32+"; ``"4x"`` (GB per vCPU) kept; GB units."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        fail(f"memory must be a number or a string like '32+', got {value!r}")
    s = str(value).strip()
    suffix = ""
    if s.endswith(("+", "x")):
        suffix, s = s[-1], s[:-1]
    if suffix == "x":
        try:
            x = float(s)
        except ValueError:
            fail(f"bad memory {value!r}", "'Nx' means N GB per vCPU, e.g. '4x'")
    else:
        x = size_to_gib(s, "memory")
    if not x > 0 or math.isinf(x):
        fail(f"memory must be positive, got {value!r}")
    _in_table(x, "memory_per_cpu" if suffix == "x" else "memory", "memory", value)
    return _fmt_num(round(x, 4)) + suffix


def parse_disk_size(value: Any) -> int:
    """Whole GB: ``100`` / ``"100GB"`` / ``"1TB"``; non-positive or fractional -> error."""
    gib = size_to_gib(value, "disk_size")
    if gib <= 0:
        fail(f"disk_size must be positive, got {value!r}", "e.g. disk_size: 256 (GB)")
    if not float(gib).is_integer():
        fail(f"disk_size must be a whole number of GB, got {value!r}", "e.g. '100GB' or '1TB'")
    _in_table(gib, "disk_size", "disk_size", value)
    return int(gib)


def _one_port(p: Any) -> str:
    if isinstance(p, bool):
        fail(f"bad port {p!r}")
    s = str(p).strip()
    m = re.fullmatch(r"([0-9]{1,6})(?:\s*-\s*([0-9]{1,6}))?", s)
    if not m:
        fail(f"bad port {p!r}", "write a port like 8080 or a range like '10000-10010'")
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) else lo
    if not (1 <= lo <= 65535 and 1 <= hi <= 65535):
        fail(f"port out of range in {p!r}", "ports are 1-65535")
    if hi < lo:
        fail(f"port range {p!r} is reversed", f"write '{hi}-{lo}'")
    return str(lo) if lo == hi else f"{lo}-{hi}"


def parse_ports(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, dict | tuple | set):
        fail(f"ports must be a port, a range or a list of them, got {type(value).__name__}",
             "e.g. ports: 8080, ports: '10000-10010' or ports: [8080, 8443]")
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for i, p in enumerate(items):
        try:
            port = _one_port(p)
        except Exception as e:  # re-anchor list items
            if isinstance(value, list):
                from pydantic_core import PydanticCustomError

                if isinstance(e, PydanticCustomError):
                    ctx = e.context or {}
                    fail(str(ctx.get("msg")), ctx.get("hint"), sub=(i,))
            raise
        if port not in out:
            out.append(port)
    _port_count(out, value)
    return out


def _port_count(ports: list[str], raw: Any) -> None:
    """At most BOUNDS['ports'] ports in all (a range counts each of its ports)."""
    seen: set[int] = set()
    cap = int(bounds.BOUNDS["ports"].hi)
    for p in ports:
        lo, _, hi = p.partition("-")
        a, b = int(lo), int(hi or lo)
        if b - a + 1 > cap:  # without building a set of 65k ports
            break
        seen.update(range(a, b + 1))
        if len(seen) > cap:
            break
    else:
        return
    fail(f"ports open more than {cap} ports ({raw!r})",
         f"open only the ports the task serves on (at most {cap}), e.g. '8000-8010'")


_DUR_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)
_DUR_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: Any, *, default_unit: str, what: str) -> int | float:
    """``5`` (in default_unit) / ``"30m"`` / ``"5h"`` / ``"1d"`` -> seconds."""
    if isinstance(value, bool):
        fail(f"bad {what} {value!r}", "e.g. 30, '30m', '5h' or '1d'")
    if isinstance(value, int | float):
        secs = float(value) * _DUR_SECONDS[default_unit]
    elif isinstance(value, str) and (m := _DUR_RE.match(value)):
        secs = float(m.group(1)) * _DUR_SECONDS[(m.group(2) or default_unit).lower()]
    else:
        fail(f"bad {what} {value!r}", "e.g. 30, '30m', '5h' or '1d'")
    if secs < 0:
        fail(f"{what} must not be negative, got {value!r}")
    _bounded(secs, value, what, MAX_DURATION_S)
    return int(secs) if float(secs).is_integer() else secs
