"""GPU detection: NVIDIA (nvidia-smi) and AMD (amd-smi, rocm-smi), plus fakes for tests.

Parsers are pure functions over the tools' text output. Python 3.8 compatible.
"""

# ruff: noqa: UP031, UP041, UP006, UP035, UP045  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

NVIDIA_QUERY = [
    "nvidia-smi",
    "--query-gpu=name,memory.total,uuid",
    "--format=csv,noheader,nounits",
]
AMD_SMI_QUERY = ["amd-smi", "static", "--json"]
ROCM_SMI_QUERY = ["rocm-smi", "--showproductname", "--json"]

# PCI device id -> canonical name (gpuhunt constraints; 0x74b5 is the MI300X SR-IOV VF). The
# one table of AMD device ids: skyd.clouds.gpunames and the kubernetes node labels read it.
AMD_DEVICE_IDS: dict[int, str] = {
    0x74A1: "MI300X",
    0x74A9: "MI300X",
    0x74B5: "MI300X",
    0x74BD: "MI300X",
    0x74A5: "MI325X",
    0x75A0: "MI350X",
    0x75A3: "MI355X",
    0x74A0: "MI300A",
    0x74A2: "MI308X",
    0x74B6: "MI308X",
    0x7408: "MI250X",
    0x740C: "MI250",
    0x740F: "MI210",
}

# Canonical NVIDIA names, most specific first (matched as whole tokens).
_NVIDIA_TOKENS = [
    "GB200", "GH200", "B200", "B100", "H200", "H100", "L40S", "L40", "L4", "A100", "A10G",
    "A10", "A40", "A30", "A16", "A6000", "A5000", "A4000", "V100", "P100", "P40", "P4",
    "T4", "K80", "M60",
]  # fmt: skip

# Memory (MiB) reported for fake GPUs.
_FAKE_MEMORY_MIB = {"H100": 81559, "H200": 143771, "A100": 40960, "A100-80GB": 81920,
                    "MI300X": 196592, "MI325X": 262144, "MI355X": 294912, "T4": 15360}  # fmt: skip


@dataclass
class Gpu:
    index: int
    name: str
    memory_mib: int
    uuid: str
    vendor: str  # "nvidia" | "amd"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def normalize_nvidia_name(raw: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> H100, 'NVIDIA A100-SXM4-80GB' -> A100-80GB, 'Tesla T4' -> T4."""
    s = raw.strip().upper()
    for prefix in ("NVIDIA ", "TESLA ", "GEFORCE ", "QUADRO "):
        if s.startswith(prefix):
            s = s[len(prefix) :]
    m = re.search(r"RTX\s*(\d{4})", s)
    if m and "ADA" in s:
        return f"RTX{m.group(1)}-Ada"
    if m:
        return f"RTX{m.group(1)}"
    for token in _NVIDIA_TOKENS:
        if re.search(rf"(?<![A-Z0-9]){token}(?![A-Z0-9])", s):
            if token == "A100" and "80G" in s:
                return "A100-80GB"
            if token == "V100" and "32G" in s:
                return "V100-32GB"
            return token
    return re.sub(r"\s+", "-", raw.strip()) or "unknown"


def normalize_amd_name(raw: str, device_id: str | None = None) -> str:
    """Market name or PCI device id -> canonical name (MI300X, MI325X, ...)."""
    if device_id:
        try:
            known = AMD_DEVICE_IDS.get(int(str(device_id).strip(), 16))
        except ValueError:
            known = None
        if known:
            return known
    s = (raw or "").strip().upper()
    m = re.search(r"MI\d{3}[A-Z]?", s)
    if m:
        return m.group(0)
    m = re.search(r"MI\d{2,3}", s)
    if m:
        return m.group(0)
    cleaned = re.sub(r"\b(AMD|INSTINCT)\b", "", raw or "", flags=re.I).strip()
    return re.sub(r"\s+", "-", cleaned) or "unknown"


def _int_or_zero(value: Any) -> int:
    try:
        return int(float(str(value).strip().split()[0]))
    except (ValueError, IndexError):
        return 0


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """Parse `nvidia-smi --query-gpu=name,memory.total,uuid --format=csv,noheader,nounits`."""
    gpus: list[Gpu] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0] or parts[0].lower() == "name":
            continue
        if line.lower().startswith(("warning", "error", "failed", "nvidia-smi")):
            continue
        uuid = parts[2] if len(parts) > 2 and parts[2].strip("[]").upper() != "N/A" else ""
        gpus.append(
            Gpu(len(gpus), normalize_nvidia_name(parts[0]), _int_or_zero(parts[1]), uuid, "nvidia")
        )
    return gpus


def _load_json_after_noise(text: str) -> Any:
    """json.loads of the first JSON document in text, skipping WARNING lines before it."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"^\s*[\[{]", text, flags=re.M):
        start = text.index(m.group(0).strip()[0], m.start())
        try:
            return decoder.raw_decode(text[start:])[0]
        except ValueError:
            continue
    raise ValueError("no JSON document in output")


def _lower_keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k).lower(): _lower_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_lower_keys(v) for v in obj]
    return obj


def _vram_mib(vram: Any) -> int:
    if not isinstance(vram, dict):
        return 0
    size = vram.get("size", vram.get("vram_size", 0))
    if isinstance(size, dict):
        value, unit = _int_or_zero(size.get("value", 0)), str(size.get("unit", "MB")).upper()
    else:
        value = _int_or_zero(size)
        unit = str(size).upper().split()[-1] if str(size).strip() else "MB"
    return value * 1024 if unit.startswith("G") else value


def parse_amd_smi_static(text: str) -> list[Gpu]:
    """Parse `amd-smi static --json`: ROCm 6 flat list or ROCm 7 {"gpu_data": [...]}."""
    data = _lower_keys(_load_json_after_noise(text))
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    gpus: list[Gpu] = []
    for i, item in enumerate(data if isinstance(data, list) else []):
        if not isinstance(item, dict):
            continue
        asic: dict[str, Any] = item["asic"] if isinstance(item.get("asic"), dict) else {}
        bus: dict[str, Any] = item["bus"] if isinstance(item.get("bus"), dict) else {}
        index = item.get("gpu", i)
        name = normalize_amd_name(str(asic.get("market_name", "")), asic.get("device_id"))
        uuid = ""
        for cand in (asic.get("asic_serial"), bus.get("bdf")):
            if cand and str(cand).upper() != "N/A":
                uuid = str(cand)
                break
        idx = index if isinstance(index, int) else i
        gpus.append(Gpu(idx, name, _vram_mib(item.get("vram")), uuid, "amd"))
    return gpus


def parse_rocm_smi_product(text: str) -> list[Gpu]:
    """Parse `rocm-smi --showproductname --json` ({"card0": {"Card Series": ...}, "system": ...})."""
    data = _lower_keys(_load_json_after_noise(text))
    gpus: list[Gpu] = []
    cards = [(k, v) for k, v in data.items() if k.startswith("card") and isinstance(v, dict)]
    for key, card in sorted(cards, key=lambda kv: _int_or_zero(kv[0][4:] or "0")):
        series = str(card.get("card series", card.get("card sku", "")))
        model = card.get("card model") or card.get("device id")
        name = normalize_amd_name(series, str(model) if model else None)
        gpus.append(Gpu(_int_or_zero(key[4:] or "0"), name, 0, "", "amd"))
    return gpus


def fake_gpus(spec: str) -> list[Gpu]:
    """'H100:2' or 'MI300X:8' -> fake GPUs (vendor amd for MI* names)."""
    spec = spec.strip()
    if not spec:
        return []
    name, _, count = spec.partition(":")
    n = int(count) if count else 1
    vendor = "amd" if name.upper().startswith("MI") else "nvidia"
    mem = _FAKE_MEMORY_MIB.get(name, 0)
    return [Gpu(i, name, mem, "fake-%s-%d" % (name, i), vendor) for i in range(n)]


Runner = Callable[[List[str]], Optional[str]]


def _run(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


#: the variables that restrict which GPUs a process may use, per vendor, the first set wins:
#: CUDA's, ROCm's (ROCR applies first, HIP indexes what ROCR left), and Slurm's generic
#: ordinal (gres ``Flags=opencl_env`` or no flag: set for every GPU type).
VISIBLE_VARS = {"nvidia": ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"),
                "amd": ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")}


def visible_entries(vendor: str, env: Mapping[str, str]) -> Optional[List[str]]:
    """The device list this process was given for ``vendor`` (None: no restriction). An empty
    value, or Slurm's ``NoDevFiles``, means none: the allocation has no GPU on this node."""
    for var in VISIBLE_VARS.get(vendor, ()):
        if var in env:
            raw = env[var].strip()
            if raw in ("", "NoDevFiles"):
                return []
            return [e.strip() for e in raw.split(",") if e.strip()]
    return None


def restrict_visible(gpus: List[Gpu], env: Mapping[str, str]) -> List[Gpu]:
    """The GPUs of ``gpus`` this process may use, renumbered 0..n-1 as CUDA/HIP number them.

    nvidia-smi and amd-smi list every GPU of the machine whatever CUDA_VISIBLE_DEVICES /
    ROCR_VISIBLE_DEVICES say; a batch scheduler (Slurm's gres) or a container runtime sets
    those to the devices it allocated. Entries are indices into the machine's list (Slurm
    without device cgroups), or indices into an already narrowed list (with cgroups: the tool
    then shows only the allocated GPUs), or UUIDs (``GPU-...``). Entry k of the list is GPU
    k of the result; ``job_visible`` maps it back when the agent starts a job."""
    if not gpus:
        return gpus
    entries = visible_entries(gpus[0].vendor, env)
    if entries is None:
        return gpus
    chosen: List[Gpu] = []
    for e in entries:
        pick: Optional[Gpu] = None
        if e.isdigit():
            i = int(e)
            pick = gpus[i] if i < len(gpus) else None
        else:
            pick = next((g for g in gpus if g.uuid and (g.uuid == e or g.uuid.startswith(e))), None)
        if pick is None:
            # an index beyond what the tool shows: the tool already sees only the
            # allocated devices (cgroups), in the allocation's order
            return [Gpu(k, g.name, g.memory_mib, g.uuid, g.vendor)
                    for k, g in enumerate(gpus[: len(entries)])]
        if pick not in chosen:
            chosen.append(pick)
    return [Gpu(k, g.name, g.memory_mib, g.uuid, g.vendor) for k, g in enumerate(chosen)]


def job_visible(vendor: str, slots: List[int], env: Mapping[str, str]) -> Dict[str, str]:
    """The device variables of a job given the agent's GPU ``slots`` (0..n-1 of
    `restrict_visible`): mapped through the list the agent itself was given, if any.
    AMD: ROCR_VISIBLE_DEVICES names the devices, HIP_VISIBLE_DEVICES indexes the ones ROCR
    left (0..k-1), as AMD documents for the two together."""
    entries = visible_entries(vendor, env)
    mapped = [entries[s] if entries is not None and s < len(entries) else str(s) for s in slots]
    if vendor == "amd":
        rocr = visible_entries("amd", {k: v for k, v in env.items() if k == "ROCR_VISIBLE_DEVICES"})
        if rocr is None and "HIP_VISIBLE_DEVICES" in env:
            # the agent was narrowed by HIP only: keep ROCR as is, HIP names the devices
            return {"HIP_VISIBLE_DEVICES": ",".join(mapped)}
        return {"ROCR_VISIBLE_DEVICES": ",".join(mapped),
                "HIP_VISIBLE_DEVICES": ",".join(str(k) for k in range(len(slots)))}
    return {"CUDA_VISIBLE_DEVICES": ",".join(mapped)}


def detect(
    env: Mapping[str, str] | None = None, run: Runner = _run, amd_present: bool | None = None
) -> list[Gpu]:
    """Detect the GPUs this node gives the agent: what the tools show, narrowed to the devices
    its environment makes visible (`restrict_visible`). NVIDIA is checked before /dev/kfd (an
    AMD iGPU must not hide an NVIDIA card). Blocking: call from a thread or before the event
    loop starts."""
    env = os.environ if env is None else env
    if "SKYD_FAKE_GPUS" in env:
        return fake_gpus(env["SKYD_FAKE_GPUS"])
    return restrict_visible(_detect_all(run, amd_present), env)


def _detect_all(run: Runner, amd_present: bool | None) -> list[Gpu]:
    """Every GPU the machine's tools show."""
    out = run(NVIDIA_QUERY)
    if out:
        gpus = parse_nvidia_smi(out)
        if gpus:
            return gpus
    if amd_present is None:
        amd_present = bool(os.path.exists("/dev/kfd") or shutil.which("amd-smi")
                           or shutil.which("rocm-smi"))  # fmt: skip
    if amd_present:
        for cmd, parser in (
            (AMD_SMI_QUERY, parse_amd_smi_static),
            (ROCM_SMI_QUERY, parse_rocm_smi_product),
        ):
            out = run(cmd)
            if not out:
                continue
            try:
                gpus = parser(out)
            except (ValueError, AttributeError):
                continue
            if gpus:
                return gpus
    return []
