"""Accelerator registry: canonical names, suggestions, specs, device names."""

from __future__ import annotations

import pytest

from skyd.errors import InvalidSpecError
from skyd.models import (
    ACCELERATOR_REGISTRY,
    accelerator_info,
    canonical_accelerator,
    expand_accelerators,
    normalize_device_name,
    parse_accelerator_spec,
)

# AcceleratorName values of the bundled SkyPilot catalogs (accelerators.csv, runpod, lambda,
# aws, gcp): each must canonicalize to itself so catalog lookups need no mapping.
CATALOG_NAMES = [
    "A10", "A100", "A100-80GB", "A100-80GB-SXM", "A10G", "A40", "A4000", "A6000", "B200",
    "GH200", "Gaudi HL-205", "H100", "H100-MEGA", "H100-NVL", "H100-NVLINK", "H100-SXM",
    "H200", "H200-SXM", "K80", "L4", "L40", "L40S", "M4000", "M60", "MI300X", "NVIDIA",
    "P100", "P4", "P4000", "RTX3060", "RTX3080", "RTX3090", "RTX4000-Ada", "RTX4060",
    "RTX4080", "RTX4090", "RTX5060", "RTX5090", "RTX6000", "RTX6000-Ada", "RTXA4000",
    "RTXA4500", "RTXA5000", "RTXA6000", "Radeon MI25", "Radeon Pro V520", "T4", "T4g",
    "V100", "V100-32GB", "tpu-v2", "tpu-v3", "tpu-v4", "tpu-v5litepod", "tpu-v5p", "tpu-v6e",
]


@pytest.mark.parametrize("name", CATALOG_NAMES)
def test_catalog_names_are_canonical(name: str) -> None:
    assert canonical_accelerator(name) == name
    assert canonical_accelerator(name.lower()) == name


def test_case_insensitive_and_aliases() -> None:
    assert canonical_accelerator("h100") == "H100"
    assert canonical_accelerator("mi300x") == "MI300X"
    assert canonical_accelerator("rtx 4090") == "RTX4090"
    assert canonical_accelerator("a100-40gb") == "A100"
    # MI300 is not necessarily an MI300X (MI300A exists): it stays itself.
    assert canonical_accelerator("MI300") == "MI300"
    assert canonical_accelerator("mi300") == "MI300"


def test_amd_instinct_registry() -> None:
    for name, mem in [("MI355X", 288), ("MI350X", 288), ("MI325X", 256), ("MI300X", 192),
                      ("MI300A", 128), ("MI250X", 128), ("MI250", 128), ("MI210", 64)]:
        info = accelerator_info(name.lower())
        assert (info.name, info.vendor, info.memory_gib) == (name, "amd", mem)
    assert accelerator_info("h100").vendor == "nvidia"
    assert accelerator_info("A100").memory_gib == 40
    assert accelerator_info("A100-80GB").memory_gib == 80
    assert all(e.vendor in ("nvidia", "amd", "google", "intel", "aws", "xilinx")
               for e in ACCELERATOR_REGISTRY.values())


def test_unknown_accelerator_suggests() -> None:
    with pytest.raises(InvalidSpecError) as ei:
        canonical_accelerator("H10O")
    e = ei.value
    assert e.field == "resources.accelerators"
    assert "unknown accelerator 'H10O'" in e.message
    assert e.hint is not None and "'H100'" in e.hint
    with pytest.raises(InvalidSpecError) as ei:
        canonical_accelerator("MI300Z")
    assert ei.value.hint is not None and "MI300X" in ei.value.hint
    with pytest.raises(InvalidSpecError) as ei:
        canonical_accelerator("zzzzzzzz")
    assert ei.value.hint is not None and "gpus list" in ei.value.hint


@pytest.mark.parametrize("spec,want", [
    ("A100", ("A100", 1)), ("a100:8", ("A100", 8)), ("T4:0.5", ("T4", 0.5)),
    ("H100:1.0", ("H100", 1)), ("tpu-v5p:8", ("tpu-v5p", 8)), ("nvidia:H100:2", ("H100", 2)),
    (" MI300X : 8 ", ("MI300X", 8)),
])
def test_parse_spec(spec: str, want: tuple[str, float]) -> None:
    got = parse_accelerator_spec(spec)
    assert got == want
    assert type(got[1]) is type(want[1])


@pytest.mark.parametrize("spec,msg", [
    ("A100:x", "bad accelerator count"), ("A100:-1", "must be positive"),
    ("A100:0", "must be positive"), ("", "empty"), ("A100::8", "malformed"),
    ("amd:H100:8", "nvidia accelerator, not amd"), ("Q100:8", "unknown accelerator"),
])
def test_parse_spec_errors(spec: str, msg: str) -> None:
    with pytest.raises(InvalidSpecError, match=msg):
        parse_accelerator_spec(spec)


def test_expand_forms() -> None:
    assert expand_accelerators({"A100": 8, "h100": 8}) == ([("A100", 8), ("H100", 8)], False)
    assert expand_accelerators(["H100:8", "A100:8"]) == ([("H100", 8), ("A100", 8)], True)
    assert expand_accelerators("[H100:8, A100:8]") == ([("H100", 8), ("A100", 8)], True)
    assert expand_accelerators("{A100:1, V100:1}") == ([("A100", 1), ("V100", 1)], False)
    assert expand_accelerators({"A100": None}) == ([("A100", 1)], False)


def test_memory_based_forms() -> None:
    opts, ordered = expand_accelerators("amd:192GB+:8")
    assert not ordered
    assert {n for n, _ in opts} == {"MI355X", "MI350X", "MI325X", "MI308X", "MI300X"}
    assert all(c == 8 for _, c in opts)
    names = {n for n, _ in expand_accelerators("80GB:4")[0]}
    assert {"H100", "A100-80GB"} <= names and "A100" not in names and "MI300X" not in names
    nv = {n for n, _ in expand_accelerators("nvidia:141GB+")[0]}
    assert "H200" in nv and "B200" in nv and not any(n.startswith("MI") for n in nv)


@pytest.mark.parametrize("raw,want", [
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 PCIe", "H100"),
    ("NVIDIA H100 NVL", "H100-NVL"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100"),
    ("NVIDIA A100 80GB PCIe", "A100-80GB"),
    ("Tesla T4", "T4"),
    ("Tesla V100-SXM2-32GB", "V100-32GB"),
    ("Tesla V100-SXM2-16GB", "V100"),
    ("Tesla P100-PCIE-16GB", "P100"),
    ("NVIDIA A10G", "A10G"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA GeForce RTX 4090", "RTX4090"),
    ("NVIDIA RTX A6000", "RTXA6000"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX6000-Ada"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("AMD Instinct MI300X OAM", "MI300X"),
    ("MI300X-O", "MI300X"),
    ("AMD Instinct MI300X VF", "MI300X"),
    ("AMD Instinct MI300X", "MI300X"),
    ("AMD Instinct MI355X", "MI355X"),
    ("MI350X", "MI350X"),
    ("AMD INSTINCT MI250 (MCM) OAM AC MBA", "MI250"),
    ("Instinct MI210", "MI210"),
    ("AMD_Instinct_MI300X_OAM", "MI300X"),
    ("amd_mi300x", "MI300X"),
    ("MI355X_288GB", "MI355X"),
    ("MI300X-192GB", "MI300X"),
])
def test_normalize_device_name(raw: str, want: str) -> None:
    assert normalize_device_name(raw) == want


@pytest.mark.parametrize("raw", ["", "   ", "Intel(R) UHD Graphics 630", "llvmpipe", "NVIDIA"])
def test_normalize_device_name_unknown(raw: str) -> None:
    assert normalize_device_name(raw) is None


def test_flow_mapping_without_spaces_is_an_any_of_set() -> None:
    from skyd.models import load_task

    task = load_task("t.yaml", text="resources:\n  accelerators: {A100:8, H100:8}\n")
    assert [r.accelerators for r in task.resources] == [{"A100": 8}, {"H100": 8}]
    assert not task.resources_ordered
