"""What the GPU tools of a fake machine print, made for the cards and image it has: the
fake providers (runpod.py, doapi.py, crusoeapi.py) give a machine the GPUs of its type, shown
to ``nvidia-smi`` / ``amd-smi`` only when its image carries the driver stack (NVIDIA driver
+ CUDA, or ROCm) — an image without one shows no GPU, as on a real machine."""

from __future__ import annotations

import json
from pathlib import Path

#: canonical card -> (vendor, the name its tool prints, MiB of memory, PCI device id)
CARDS: dict[str, tuple[str, str, int, str]] = {
    "MI300X": ("amd", "AMD Instinct MI300X OAM", 196592, "0x74a1"),
    "MI325X": ("amd", "AMD Instinct MI325X OAM", 262128, "0x74a5"),
    "MI355X": ("amd", "AMD Instinct MI355X", 294896, "0x75a3"),
    "H100": ("nvidia", "NVIDIA H100 PCIe", 81559, ""),
    "H100-SXM": ("nvidia", "NVIDIA H100 80GB HBM3", 81559, ""),
    "H200-SXM": ("nvidia", "NVIDIA H200", 143771, ""),
    "L40S": ("nvidia", "NVIDIA L40S", 46068, ""),
    "A100-80GB": ("nvidia", "NVIDIA A100 80GB PCIe", 81920, ""),
    "RTX4000-Ada": ("nvidia", "NVIDIA RTX 4000 Ada Generation", 20475, ""),
    "RTX6000-Ada": ("nvidia", "NVIDIA RTX 6000 Ada Generation", 49140, ""),
}


def profile(directory: Path, card: str | None, count: int, *, rocm: bool, cuda: bool,
            printed_name: str | None = None) -> dict[str, Path] | str:
    """The fake host's GPU tools for ``count`` × ``card`` on an image with (``rocm``,
    ``cuda``): a {tool: file it prints} map, or ``"none"`` (no tool answers)."""
    if not card or count < 1 or card not in CARDS and printed_name is None:
        return "none"
    vendor, name, mib, dev = CARDS.get(card, ("nvidia", printed_name or card, 0, ""))
    name = printed_name or name
    directory.mkdir(parents=True, exist_ok=True)
    if vendor == "amd":
        if not rocm:
            return "none"
        out = directory / "amd-smi.json"
        out.write_text(json.dumps([{"gpu": i, "asic": {"market_name": name, "device_id": dev},
                                    "vram": {"size": {"value": mib, "unit": "MB"}}} for i in range(count)]))
        return {"amd-smi": out}
    if not cuda:
        return "none"
    out = directory / "nvidia-smi.txt"
    out.write_text("".join(f"{name}, {mib}, GPU-{directory.name}-{i:04d}\n" for i in range(count)))
    return {"nvidia-smi": out}
