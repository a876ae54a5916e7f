"""GPU detection parsers over recorded nvidia-smi / amd-smi / rocm-smi outputs."""

# ruff: noqa: UP031

from __future__ import annotations

from pathlib import Path

import pytest

from skyd.nodeagent import gpu

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"


def test_nvidia_h100_node() -> None:
    gpus = gpu.parse_nvidia_smi((DATA / "nvidia_h100x8.csv").read_text())
    assert [g.name for g in gpus] == ["H100"] * 8
    assert [g.index for g in gpus] == list(range(8))
    assert gpus[0].memory_mib == 81559 and gpus[0].uuid.startswith("GPU-5e2c")
    assert {g.vendor for g in gpus} == {"nvidia"}


def test_nvidia_name_variants() -> None:
    gpus = gpu.parse_nvidia_smi((DATA / "nvidia_mixed.csv").read_text())
    assert [g.name for g in gpus] == [
        "A100-80GB", "A100", "T4", "V100-32GB", "A10G", "L40S", "GH200", "RTX4090", "H200",
    ]  # fmt: skip
    assert gpus[3].uuid == "" and gpus[8].uuid == ""  # [N/A] / N/A


@pytest.mark.parametrize(
    ("raw", "device_id", "want"),
    [
        ("AMD Instinct MI300X OAM", None, "MI300X"),
        ("MI300X-O", None, "MI300X"),
        ("AMD Instinct MI300X VF", None, "MI300X"),
        ("", "0x74a1", "MI300X"),
        ("", "0x74A9", "MI300X"),
        ("whatever", "0x74b5", "MI300X"),
        ("", "0x74bd", "MI300X"),
        ("", "0x74a5", "MI325X"),
        ("", "0x75a0", "MI350X"),
        ("", "0x75a3", "MI355X"),
        ("AMD Instinct MI355X", "N/A", "MI355X"),
        ("AMD INSTINCT MI250 (MCM) OAM AC MBA", None, "MI250"),
        ("Instinct MI210", "0x0c34", "MI210"),
    ],
)
def test_amd_names(raw: str, device_id: str | None, want: str) -> None:
    assert gpu.normalize_amd_name(raw, device_id) == want


def test_amd_smi_rocm6_flat_list() -> None:
    gpus = gpu.parse_amd_smi_static((DATA / "amd_smi_rocm6.json").read_text())
    assert [(g.index, g.name, g.memory_mib, g.vendor) for g in gpus] == [
        (0, "MI300X", 196592, "amd")
    ]
    assert gpus[0].uuid == "0000:05:00.0"


def test_amd_smi_rocm7_wrapped() -> None:
    gpus = gpu.parse_amd_smi_static((DATA / "amd_smi_rocm7.json").read_text())
    assert [(g.index, g.name, g.memory_mib) for g in gpus] == [(0, "MI355X", 0)]


def test_amd_smi_warnings_uppercase_na_vf() -> None:
    gpus = gpu.parse_amd_smi_static((DATA / "amd_smi_warnings_vf.txt").read_text())
    assert [g.name for g in gpus] == ["MI300X", "MI300X", "MI350X", "MI250"]
    assert [g.memory_mib for g in gpus] == [0, 196592, 262144, 65536]
    assert gpus[0].uuid == "0000:11:00.0"  # asic_serial N/A -> bus id


def test_rocm_smi_formats() -> None:
    old = gpu.parse_rocm_smi_product((DATA / "rocm_smi_mi210.json").read_text())
    assert [(g.index, g.name) for g in old] == [(0, "MI210")]
    new = gpu.parse_rocm_smi_product((DATA / "rocm_smi_mi300x.txt").read_text())
    assert [(g.index, g.name) for g in new] == [(0, "MI300X"), (1, "MI300X")]  # system skipped


def test_detect_order_and_fallbacks() -> None:
    nvidia = (DATA / "nvidia_h100x8.csv").read_text()
    rocm = (DATA / "rocm_smi_mi300x.txt").read_text()
    calls: list[str] = []

    def run_nvidia(cmd: list[str]) -> str | None:
        calls.append(cmd[0])
        return nvidia if cmd[0] == "nvidia-smi" else rocm

    assert [g.name for g in gpu.detect({}, run_nvidia)] == ["H100"] * 8
    assert calls == ["nvidia-smi"]  # NVIDIA first: an AMD iGPU must not hide it

    def run_amd(cmd: list[str]) -> str | None:
        return {"amd-smi": "WARNING: broken\nnot json", "rocm-smi": rocm}.get(cmd[0])

    assert [g.name for g in gpu.detect({}, run_amd, amd_present=True)] == ["MI300X", "MI300X"]
    assert gpu.detect({}, lambda cmd: None, amd_present=True) == []
    assert [g.name for g in gpu.detect({"SKYD_FAKE_GPUS": "MI300X:8"}, run_nvidia)] == [
        "MI300X"
    ] * 8


def test_fake_gpus() -> None:
    assert [(g.name, g.vendor) for g in gpu.fake_gpus("H100:2")] == [("H100", "nvidia")] * 2
    assert {g.vendor for g in gpu.fake_gpus("MI300X:8")} == {"amd"}
    assert gpu.fake_gpus("") == []


def test_agent_sources_are_python38_syntax() -> None:
    """The agent ships to nodes with Python 3.8: its modules must parse as 3.8 and defer
    annotations (so `X | None` / `list[int]` in annotations are never evaluated)."""
    import ast

    root = Path(gpu.__file__).resolve().parents[1]
    files = sorted((root / "nodeagent").glob("*.py")) + [
        root / "proto" / "skyd_agent" / "__init__.py"
    ]
    for f in files:
        src = f.read_text()
        ast.parse(src, filename=str(f), feature_version=(3, 8))
        if f.parent.name == "nodeagent" and f.name != "__init__.py":
            assert "from __future__ import annotations" in src, f
