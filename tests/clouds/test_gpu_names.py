"""The one GPU-name table (skyd.clouds.gpunames) against the bundled catalogs: every
accelerator name of every row of the neocloud catalogs resolves to that provider's own id
(and back), card variants stay apart, and the agent's report of a card matches its order."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from skyd.clouds import gpunames
from skyd.clouds.catalog_csv import canonical_name
from skyd.clouds.do.sizes import from_slug
from skyd.models.accelerators import lookup_accelerator

DATA = Path(gpunames.__file__).resolve().parent / "data"
PROVIDERS = ("runpod", "vultr", "hotaisle", "do", "amddevcloud", "crusoe")


def _rows(provider: str) -> list[tuple[int, dict[str, str]]]:
    with (DATA / f"{provider}.csv").open(newline="") as f:
        return list(enumerate(csv.DictReader(f), start=2))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_catalog_row_names_a_gpu_the_provider_has_an_id_for(provider: str) -> None:
    rows = _rows(provider)
    assert rows, provider
    for line, r in rows:
        name = r["AcceleratorName"]
        if not name:
            continue  # a CPU row
        where = f"{provider}.csv:{line} ({r['InstanceType']}, {name!r})"
        canon = canonical_name(name)
        assert canon == name, f"{where}: the catalog name is not canonical ({canon!r})"
        assert lookup_accelerator(canon) == canon, f"{where}: not in the accelerator registry"
        pid = gpunames.provider_gpu_id(provider, canon)
        assert pid, f"{where}: no {provider} id for {canon}"
        assert gpunames.canonical_gpu(provider, pid) == canon, f"{where}: {pid!r} reads back otherwise"
        if provider in ("do", "amddevcloud"):  # the size slug names the same card and count
            assert from_slug(r["InstanceType"], provider) == (canon, int(float(r["AcceleratorCount"]))), where
        if provider == "runpod":  # 8x_H100-SXM_SECURE: the type names the same card
            assert r["InstanceType"].split("_")[1] == canon, where


def test_card_variants_are_distinct_ids() -> None:
    ids = {c: gpunames.provider_gpu_id("runpod", c) for c in
           ("H100", "H100-SXM", "H100-NVL", "H200-SXM", "A100-80GB", "A100-80GB-SXM")}
    assert ids["H100"] == "NVIDIA H100 PCIe" and ids["H100-SXM"] == "NVIDIA H100 80GB HBM3"
    assert len(set(ids.values())) == len(ids), ids
    assert canonical_name("H100-SXM") == "H100-SXM" and canonical_name("MI355X_288GB") == "MI355X"
    assert gpunames.canonical_gpu("crusoe", "H100-SXM-80GB") == "H100-SXM"
    # every provider's ids are unique (no two cards share one)
    for p, rows in gpunames.provider_gpus().items():
        assert len({pid for _, pid, _ in rows}) == len(rows), p


@pytest.mark.parametrize(("ordered", "reported", "ok"), [
    ("H100-SXM", "H100", True), ("H100-NVL", "H100", True), ("H200-SXM", "H200", True),
    ("A100-80GB-SXM", "A100-80GB", True), ("RTXA6000", "A6000", True),
    ("RTXA4500", "NVIDIA-RTX-A4500", True), ("MI300X", "MI300X", True),
    ("MI300X", "MI355X", False), ("H100", "A100-80GB", False), ("L40S", "L40", False),
])
def test_an_agent_report_meets_the_order_of_the_same_card(ordered: str, reported: str, ok: bool) -> None:
    assert gpunames.same_card(ordered, reported) is ok


def test_every_name_in_the_table_is_a_registry_name() -> None:
    for p, rows in gpunames.provider_gpus().items():
        for canon, _, _ in rows:
            assert lookup_accelerator(canon) == canon, (p, canon)
