"""Canonical accelerator registry: names, vendors, memory; spec parsing; device-name mapping.

Every ``AcceleratorName`` in the bundled SkyPilot catalogs canonicalizes to itself, so the
solver can look canonical names up in catalogs verbatim. Lookup is case-insensitive and
ignores spaces and underscores (``h100``, ``rtx 4090``, ``MI300X`` all resolve).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Literal

from skyd.errors import InvalidSpecError

Vendor = Literal["nvidia", "amd", "google", "intel", "aws", "xilinx"]
GPU_VENDORS: tuple[str, ...] = ("nvidia", "amd")
ACCEL_FIELD = "resources.accelerators"


@dataclass(frozen=True)
class AcceleratorInfo:
    name: str
    vendor: Vendor
    memory_gib: float | None  # per device; None when unknown
    kind: Literal["gpu", "tpu", "other"] = "gpu"


def _nv(name: str, mem: float | None) -> AcceleratorInfo:
    return AcceleratorInfo(name, "nvidia", mem)


def _amd(name: str, mem: float | None) -> AcceleratorInfo:
    return AcceleratorInfo(name, "amd", mem)


def _tpu(name: str, mem: float | None) -> AcceleratorInfo:
    return AcceleratorInfo(name, "google", mem, "tpu")


_ENTRIES: tuple[AcceleratorInfo, ...] = (
    # NVIDIA data center
    _nv("GB200", 186), _nv("B200", 180), _nv("B100", 180), _nv("GH200", 96),
    _nv("H200", 141), _nv("H200-SXM", 141), _nv("H100", 80), _nv("H100-SXM", 80),
    _nv("H100-MEGA", 80), _nv("H100-NVL", 94), _nv("H100-NVLINK", 80),
    _nv("A100", 40), _nv("A100-80GB", 80), _nv("A100-80GB-SXM", 80),
    _nv("L40S", 48), _nv("L40", 48), _nv("L4", 24), _nv("A10G", 24), _nv("A10", 24),
    _nv("A40", 48), _nv("A30", 24), _nv("T4", 16), _nv("T4g", 16), _nv("V100", 16),
    _nv("V100-32GB", 32), _nv("P100", 16), _nv("P40", 24), _nv("P4", 8), _nv("K80", 12),
    _nv("M60", 8),
    # NVIDIA workstation / consumer
    _nv("RTX4090", 24), _nv("RTX4080", 16), _nv("RTX4060", 8), _nv("RTX3090", 24),
    _nv("RTX3080", 10), _nv("RTX3060", 12), _nv("RTX5090", 32), _nv("RTX5060", 8),
    _nv("RTXA6000", 48), _nv("RTXA5000", 24), _nv("RTXA4500", 20), _nv("RTXA4000", 16),
    _nv("A6000", 48), _nv("A5000", 24), _nv("A4000", 16), _nv("RTX6000-Ada", 48),
    _nv("RTX4000-Ada", 20), _nv("RTX6000", 24), _nv("RTXPRO6000", 96),
    _nv("M4000", 8), _nv("P4000", 8), _nv("K520", 4), _nv("A2", 16), _nv("A16", 16),
    _nv("A800", 80), _nv("H800", 80), _nv("H20", 96), _nv("L20", 48), _nv("L2", 24),
    _nv("B300", 288), _nv("GB300", 288), _nv("RTX2000-Ada", 16), _nv("RTX5000-Ada", 32),
    _nv("RTX4500-Ada", 24), _nv("RTXA2000", 6), _nv("RTX8000", 48), _nv("RTX5000", 16),
    _nv("RTX4000", 8), _nv("RTX3070", 8), _nv("RTX3080Ti", 12), _nv("RTX3090Ti", 24),
    _nv("RTX4070", 12), _nv("RTX4070Ti", 12), _nv("RTX4080Super", 16), _nv("RTX2080Ti", 11),
    _nv("RTX2080", 8), _nv("RTX2070", 8), _nv("TitanRTX", 24), _nv("TitanV", 12),
    _nv("GTX1080Ti", 11), _nv("GTX1080", 8), _nv("GTX1070", 8), _nv("P5000", 16),
    _nv("P6000", 24), _nv("GV100", 32),
    # The AWS catalog lists an accelerator literally named "NVIDIA".
    _nv("NVIDIA", None),
    # AMD Instinct (MI325X: 256 GB per Vultr docs / DO slug; gpuhunt says 288)
    _amd("MI355X", 288), _amd("MI350X", 288), _amd("MI325X", 256), _amd("MI308X", 192),
    _amd("MI300X", 192), _amd("MI300A", 128),
    # "MI300" is its own name (it may be an MI300X or an MI300A): memory unknown.
    _amd("MI300", None), _amd("MI250X", 128), _amd("MI250", 128),
    _amd("MI210", 64), _amd("MI100", 32), _amd("Radeon MI25", 16),
    _amd("Radeon Pro V520", 8), _amd("Radeon Pro V710", 28), _amd("RX7900XTX", 24),
    # Google TPU (memory per chip)
    _tpu("tpu-v2", 8), _tpu("tpu-v3", 16), _tpu("tpu-v4", 32), _tpu("tpu-v5litepod", 16),
    _tpu("tpu-v5p", 95), _tpu("tpu-v6e", 32),
    # Intel Gaudi (HPU)
    AcceleratorInfo("Gaudi HL-205", "intel", 32, "other"),
    AcceleratorInfo("Gaudi", "intel", 32, "other"),
    AcceleratorInfo("Gaudi2", "intel", 96, "other"),
    AcceleratorInfo("Gaudi3", "intel", 128, "other"),
    # AWS Neuron (memory per device)
    AcceleratorInfo("Inferentia", "aws", 8, "other"),
    AcceleratorInfo("Inferentia2", "aws", 32, "other"),
    AcceleratorInfo("Trainium", "aws", 32, "other"),
    AcceleratorInfo("Trainium2", "aws", 96, "other"),
    # FPGA (AWS F1)
    AcceleratorInfo("Virtex UltraScale (VU9P)", "xilinx", 64, "other"),
)

ACCELERATOR_REGISTRY: dict[str, AcceleratorInfo] = {e.name: e for e in _ENTRIES}

# Extra spellings a user may type (not device names; see normalize_device_name for those).
_ALIASES: dict[str, str] = {
    "A100-40GB": "A100",
    "A100-40G": "A100",
    "A100-80G": "A100-80GB",
    "H100-80GB": "H100",
    "H200-141GB": "H200",
    "V100-16GB": "V100",
    "MI300X-192GB": "MI300X",
    "MI355X-288GB": "MI355X",
    "RTX6000ADA": "RTX6000-Ada",
    "RTX4000ADA": "RTX4000-Ada",
    "MI25": "Radeon MI25",
    "V520": "Radeon Pro V520",
    "HL-205": "Gaudi HL-205",
    "GAUDI1": "Gaudi",
    "INF1": "Inferentia",
    "INF2": "Inferentia2",
    "TRN1": "Trainium",
    "TRN2": "Trainium2",
    "VU9P": "Virtex UltraScale (VU9P)",
}


def _key(name: str) -> str:
    return re.sub(r"[\s_]+", "", name).upper()


_LOOKUP: dict[str, str] = {_key(n): n for n in ACCELERATOR_REGISTRY}
_LOOKUP.update({_key(a): c for a, c in _ALIASES.items()})


# TPU names: a generation (``tpu-v5p``) or a slice of one (``tpu-v2-8``, ``tpu-v5litepod-16``,
# ``tpu-v6e-8``). SkyPilot lower-cases every ``tpu-`` name; so does skyd.
_TPU_RE = re.compile(r"^tpu-(v\d+[a-z]*)(?:-(\d+))?$")


def lookup_accelerator(name: str) -> str | None:
    """Canonical name for ``name`` (case-insensitive), or None when unknown."""
    s = name.strip()
    if s.lower().startswith("tpu-"):
        return s.lower() if _TPU_RE.match(s.lower()) else None
    return _LOOKUP.get(_key(s))


def get_accelerator_info(name: str) -> AcceleratorInfo | None:
    """Registry entry for a canonical name; TPU slices (``tpu-v2-8``) are made on demand."""
    info = ACCELERATOR_REGISTRY.get(name)
    if info is not None:
        return info
    m = _TPU_RE.match(name)
    if m is None or name != name.lower():
        return None
    gen = ACCELERATOR_REGISTRY.get(f"tpu-{m.group(1)}")
    # A slice is one accelerator made of several chips: no per-device memory.
    return _tpu(name, gen.memory_gib if gen is not None and m.group(2) is None else None)


def suggest_accelerators(name: str, n: int = 3) -> list[str]:
    """Close matches among canonical names and aliases (canonical names returned)."""
    keys = difflib.get_close_matches(_key(name), list(_LOOKUP), n=n * 2, cutoff=0.6)
    out: list[str] = []
    for k in keys:
        c = _LOOKUP[k]
        if c not in out:
            out.append(c)
    return out[:n]


def canonical_accelerator(name: str, *, field: str = ACCEL_FIELD) -> str:
    """Canonical accelerator name; unknown names raise InvalidSpecError with suggestions."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidSpecError(
            "empty accelerator name", field=field, hint="write e.g. 'A100:8' or 'MI300X:8'"
        )
    found = lookup_accelerator(name.strip())
    if found is not None:
        return found
    sugg = suggest_accelerators(name.strip())
    if name.strip().lower().startswith("tpu-"):
        raise InvalidSpecError(
            f"unknown TPU {name.strip()!r}", field=field,
            hint="TPU names are tpu-<generation>[-<cores>], e.g. 'tpu-v5p:8', 'tpu-v2-8', "
                 "'tpu-v5litepod-16' or 'tpu-v6e-8'")
    hint = (
        f"did you mean {', '.join(repr(s) for s in sugg)}?"
        if sugg
        else "run `skyd gpus list` to see known accelerators"
    )
    raise InvalidSpecError(f"unknown accelerator {name.strip()!r}", field=field, hint=hint)


def accelerator_info(name: str) -> AcceleratorInfo:
    """Registry entry for ``name`` (any accepted spelling)."""
    info = get_accelerator_info(canonical_accelerator(name))
    assert info is not None
    return info


# ---------------------------------------------------------------------------- specs

Count = int | float
MAX_ACCELERATOR_COUNT = 1024  # per node (skyd.bounds.BOUNDS['accelerator_count'])


def _parse_count(raw: object, spec: object, field: str) -> Count:
    if isinstance(raw, bool):
        raise InvalidSpecError(f"bad accelerator count in {spec!r}", field=field)
    if raw is None:
        return 1
    try:
        val = raw if isinstance(raw, int | float) else float(str(raw))
    except (TypeError, ValueError):
        raise InvalidSpecError(
            f"bad accelerator count {raw!r} in {spec!r}",
            field=field,
            hint="the count after ':' must be a positive number, e.g. 'A100:8' or 'T4:0.5'",
        ) from None
    if not 0 < val <= MAX_ACCELERATOR_COUNT:  # NaN fails too
        raise InvalidSpecError(
            f"accelerator count must be positive (at most {MAX_ACCELERATOR_COUNT}), got {raw!r}"
            f" in {spec!r}",
            field=field,
            hint="e.g. 'A100:8'",
        )
    return int(val) if float(val).is_integer() else float(val)


def parse_accelerator_spec(spec: str, *, field: str = ACCEL_FIELD) -> tuple[str, Count]:
    """``"A100"`` -> ("A100", 1); ``"a100:8"`` -> ("A100", 8); ``"T4:0.5"`` -> ("T4", 0.5)."""
    opts = _expand_string(spec, field)
    if len(opts) != 1:
        raise InvalidSpecError(
            f"{spec!r} names several accelerators; one was expected", field=field
        )
    return opts[0]


_MEM_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(GB|GIB|G)?(\+)?$", re.IGNORECASE)


def _expand_string(spec: str, field: str) -> list[tuple[str, Count]]:
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidSpecError(
            "empty accelerator spec", field=field, hint="write e.g. 'A100:8' or 'MI300X:8'"
        )
    parts = [p.strip() for p in spec.strip().split(":")]
    count: Count = 1
    if len(parts) > 1 and not _looks_like_memory(parts[-1]) and parts[-1].lower() not in GPU_VENDORS:
        if lookup_accelerator(parts[-1]) is None:
            count = _parse_count(parts[-1], spec, field)
            parts = parts[:-1]
    vendor: str | None = None
    mem: tuple[float, bool] | None = None
    name: str | None = None
    for p in parts:
        if not p:
            raise InvalidSpecError(f"malformed accelerator spec {spec!r}", field=field,
                                   hint="write NAME or NAME:COUNT, e.g. 'A100:8'")
        if p.lower() in GPU_VENDORS and vendor is None:
            vendor = p.lower()
        elif _looks_like_memory(p) and mem is None and ("g" in p.lower() or p.endswith("+")):
            m = _MEM_RE.match(p)
            assert m is not None
            mem = (float(m.group(1)), bool(m.group(3)))
        elif name is None:
            name = canonical_accelerator(p, field=field)
        else:
            raise InvalidSpecError(f"malformed accelerator spec {spec!r}", field=field,
                                   hint="write NAME or NAME:COUNT, e.g. 'A100:8'")
    if name is not None:
        if mem is not None:
            raise InvalidSpecError(f"malformed accelerator spec {spec!r}", field=field,
                                   hint="give either a name or a memory size, not both")
        info = get_accelerator_info(name)
        assert info is not None
        if vendor is not None and info.vendor != vendor:
            raise InvalidSpecError(
                f"{name} is a {info.vendor} accelerator, not {vendor}", field=field
            )
        return [(name, count)]
    if mem is None:
        # vendor only, e.g. "amd:8": any GPU of that vendor.
        mem = (0.0, True)
    names = _by_memory(mem[0], mem[1], vendor)
    if not names:
        raise InvalidSpecError(f"no known accelerator matches {spec!r}", field=field,
                               hint="memory forms look like '80GB+:8' or 'amd:192GB:8'")
    return [(n, count) for n in names]


def _looks_like_memory(p: str) -> bool:
    return bool(_MEM_RE.match(p)) and (p[-1] in "+bBgG")


def _by_memory(gib: float, at_least: bool, vendor: str | None) -> list[str]:
    out = []
    for e in _ENTRIES:
        if e.kind != "gpu" or e.memory_gib is None or e.name == "NVIDIA":
            continue
        if vendor is not None and e.vendor != vendor:
            continue
        if (e.memory_gib >= gib) if at_least else abs(e.memory_gib - gib) < 0.5:
            out.append(e.name)
    return out


def expand_accelerators(
    value: object, *, field: str = ACCEL_FIELD
) -> tuple[list[tuple[str, Count]], bool]:
    """All accepted ``accelerators:`` forms -> (options, ordered).

    ``"A100:8"`` -> one option; ``{A100: 8, H100: 8}`` or ``"{A100:8, H100:8}"`` -> any-of;
    ``[A100:8, H100:8]`` or ``"[A100:8, H100:8]"`` -> ordered; ``"80GB+:8"`` /
    ``"amd:192GB:8"`` -> every registry GPU with that memory (any-of).
    """
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("[") and s.endswith("]"):
            return expand_accelerators(_split_items(s[1:-1]), field=field)
        if s.startswith("{") and s.endswith("}"):
            items = _split_items(s[1:-1])
            opts: list[tuple[str, Count]] = []
            for item_s in items:
                opts.extend(_expand_string(item_s, field))
            return _dedupe(opts), False
        return _dedupe(_expand_string(s, field)), False
    if isinstance(value, dict):
        if not value:
            raise InvalidSpecError("empty accelerator set", field=field)
        opts = []
        for k, v in value.items():
            if v is None and ":" in str(k):
                # `{A100:8, H100:8}` in YAML flow style (no space after the colon) parses
                # as keys "A100:8" with null values: read each key as a spec.
                opts.extend(_expand_string(str(k), f"{field}.{k}"))
                continue
            name = canonical_accelerator(str(k), field=f"{field}.{k}")
            opts.append((name, _parse_count(v, {k: v}, f"{field}.{k}")))
        return _dedupe(opts), False
    if isinstance(value, list):
        if not value:
            raise InvalidSpecError("empty accelerator list", field=field)
        opts = []
        for i, item in enumerate(value):
            if isinstance(item, dict) and item:
                # `- T4: 1` items (a list of one-entry mappings; a null count is 1)
                opts.extend(expand_accelerators(item, field=f"{field}[{i}]")[0])
                continue
            if not isinstance(item, str):
                raise InvalidSpecError(
                    f"list items must be strings like 'A100:8' or mappings like "
                    f"{{A100: 8}}, got {item!r}",
                    field=f"{field}[{i}]",
                )
            opts.extend(_expand_string(item, f"{field}[{i}]"))
        return _dedupe(opts), True
    raise InvalidSpecError(
        f"expected a string, a mapping or a list, got {type(value).__name__}",
        field=field,
        hint="write e.g. 'A100:8', {A100: 8, H100: 8} or [A100:8, H100:8]",
    )


def _split_items(s: str) -> list[str]:
    return [i.strip().strip("'\"") for i in s.split(",") if i.strip()]


def _dedupe(opts: list[tuple[str, Count]]) -> list[tuple[str, Count]]:
    out: list[tuple[str, Count]] = []
    for o in opts:
        if o not in out:
            out.append(o)
    return out


# ---------------------------------------------------------------------------- devices

_STRIP_WORDS = re.compile(
    r"\b(NVIDIA|AMD|INSTINCT|TESLA|GEFORCE|QUADRO|RADEON|ADVANCED MICRO DEVICES)\b"
)
_AMD_RE = re.compile(r"MI\s?(\d{2,3})([A-Z]?)")
_NV_FAMILY = re.compile(
    r"(?<![A-Z0-9])(GB200|B200|B100|GH200|H200|H100|A100|A10G|A10|A30|A40|L40S|L40|L4|T4G|T4"
    r"|V100|P100|P40|P4|K80|M60)(?![A-Z0-9])"
)
_RTX_RE = re.compile(r"RTX\s*(PRO\s*)?(A?)\s*(\d{4})\s*(ADA)?")
_MEMGB = re.compile(r"(\d+)\s*GB")


def normalize_device_name(raw: str) -> str | None:
    """Map a driver-reported name to a canonical accelerator, or None if not recognized.

    ``"NVIDIA H100 80GB HBM3"`` -> H100, ``"NVIDIA A100-SXM4-80GB"`` -> A100-80GB,
    ``"Tesla T4"`` -> T4, ``"AMD Instinct MI300X OAM"`` / ``"MI300X-O"`` / ``"amd_mi300x"``
    -> MI300X, ``"AMD_Instinct_MI300X_OAM"`` (k8s label) -> MI300X.
    """
    if not raw or not raw.strip():
        return None
    direct = lookup_accelerator(raw.strip())
    if direct is not None and direct != "NVIDIA":
        return direct
    s = raw.upper().replace("_", " ")
    amd = _AMD_RE.search(s)
    if amd:
        for cand in (f"MI{amd.group(1)}{amd.group(2)}", f"MI{amd.group(1)}"):
            if cand in ACCELERATOR_REGISTRY:
                return cand
    rest = _STRIP_WORDS.sub(" ", s)
    rtx = _RTX_RE.search(rest)
    if rtx:
        pro, a, num, ada = rtx.groups()
        if ada:
            cand = f"RTX{num}-Ada"
        elif pro:
            cand = f"RTXPRO{num}"
        else:
            cand = f"RTX{'A' if a else ''}{num}"
        return cand if cand in ACCELERATOR_REGISTRY else None
    fam = _NV_FAMILY.search(rest)
    if not fam:
        return None
    name = fam.group(1)
    mem_m = _MEMGB.search(rest)
    mem_gb = int(mem_m.group(1)) if mem_m else None
    if name == "A100" and mem_gb is not None and mem_gb >= 80:
        return "A100-80GB"
    if name == "V100" and mem_gb is not None and mem_gb >= 32:
        return "V100-32GB"
    if name == "H100" and re.search(r"\bNVL\b", rest):
        return "H100-NVL"
    if name == "T4G":
        return "T4g"
    return name
