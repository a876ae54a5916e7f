"""Catalog loading, indexing, GCP pairing, overrides, versioned cache and refresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyd.clouds.catalog import IMPLEMENTED, Catalog, clear_catalog_cache, load_catalog
from skyd.clouds.catalog_csv import COLUMNS, CatalogFormatError, parse_rows
from skyd.clouds.catalog_refresh import (
    refresh_catalog,
    register_catalog_fetcher,
    unregister_catalog_fetcher,
)
from skyd.clouds.offering import Offering
from skyd.errors import NotFoundError, SkydError

HEADER = ",".join(COLUMNS)


@pytest.fixture
def bundled(skyd_home: Path) -> Catalog:
    clear_catalog_cache()
    return load_catalog()


def test_cheapest_aws_a100_8_is_p4d_at_real_price(bundled: Catalog) -> None:
    rows = [o for o in bundled.offerings(cloud="aws", accelerator="A100") if o.accelerator_count == 8]
    best = min((o for o in rows if o.price is not None), key=lambda o: o.price or 0)
    assert (best.instance_type, best.price, best.region) == ("p4d.24xlarge", 32.7726, "us-east-1")
    assert best.vcpus == 96 and best.memory_gib == 1152 and best.accelerator_memory_gib == 40


def test_gcp_gpu_rows_paired_with_host_machine_types(bundled: Catalog) -> None:
    h100 = [o for o in bundled.by_accelerator("H100", 8) if o.cloud == "gcp" and o.zone == "us-central1-a"]
    assert [(o.instance_type, o.vcpus) for o in h100] == [("a3-highgpu-8g", 208.0)]
    assert h100[0].price == pytest.approx(9.46006 + 33.60609)
    assert h100[0].spot_price == pytest.approx(2.17547 + 18.024)
    a100 = {o.instance_type for o in bundled.by_accelerator("A100") if o.cloud == "gcp"}
    assert {"a2-highgpu-1g", "a2-highgpu-8g", "a2-megagpu-16g"} <= a100
    l4 = {o.instance_type for o in bundled.by_accelerator("L4", 1) if o.cloud == "gcp"}
    assert "g2-standard-4" in l4 and "g2-standard-96" not in l4
    # T4 has no host family in the file: n1-highmem-8 at the documented host price.
    t4 = [o for o in bundled.by_accelerator("T4", 1) if o.cloud == "gcp" and o.zone == "us-central1-a"]
    assert t4[0].instance_type == "n1-highmem-8"
    assert t4[0].price == pytest.approx(0.35 + 0.473212)
    # GPU host machine types are not offered as CPU-only instances.
    assert not [o for o in bundled.cpu_only() if o.instance_type.startswith(("a2-", "a3-", "g2-"))]
    assert any(o.instance_type == "n2-standard-8" for o in bundled.cpu_only(8, exact=True))


def test_accelerator_names_canonicalised_and_card_variants_kept_apart(bundled: Catalog) -> None:
    # SXM, PCIe and NVL are different cards at different prices (SkyPilot's names): a row
    # of one is never offered as another
    sxm = bundled.by_instance_type("1x_H100-SXM_SECURE")
    assert sxm and all(o.accelerator == "H100-SXM" for o in sxm)
    pcie = bundled.by_instance_type("1x_H100_SECURE")
    assert pcie and all(o.accelerator == "H100" for o in pcie)
    assert not [o for o in bundled.by_accelerator("H100") if o.cloud == "runpod" and "SXM" in o.instance_type]
    assert bundled.canonical_accelerator("h100") == "H100"
    assert bundled.canonical_accelerator("H200-SXM") == "H200-SXM"
    assert bundled.canonical_accelerator("nope") is None
    assert {"H100", "H100-SXM", "H100-NVL"} <= set(bundled.accelerator_names())


def test_amd_rows_present_and_catalog_only_marked(bundled: Catalog) -> None:
    clouds = {o.cloud for o in bundled.by_accelerator("MI300X")}
    assert {"runpod", "vultr", "do", "crusoe", "azure", "oci", "hotaisle"} <= clouds
    vultr = bundled.offerings(cloud="vultr")
    assert [(o.instance_type, o.accelerator_count, o.price, o.spot_price, o.region) for o in vultr] == [
        ("vbm-256c-2048gb-8-mi300x-gpu", 8.0, 17.52, 14.72, "ord")
    ]
    assert bundled.by_accelerator("MI355X") and bundled.by_accelerator("MI325X")
    # Catalog clouds without a provider module are catalog-only; the enabled default is
    # the catalog clouds that have one.
    assert IMPLEMENTED["oci"] is False and IMPLEMENTED["vultr"] is True and IMPLEMENTED["aws"] is True
    assert "oci" in bundled.clouds and "oci" not in bundled.enabled
    assert bundled.enabled == {c for c in bundled.clouds if IMPLEMENTED.get(c)}
    assert bundled.with_enabled(["aws"]).enabled == {"aws"}


def test_duplicate_rows_merged() -> None:
    text = "\n".join([
        HEADER,
        "p,A100-80GB,8.0,96,1152,{},us-east-1,use1-az4,40.9,7.8",
        "p,A100-80GB,8.0,96,1152,{},us-east-1,use1-az4,40.9,",
    ])
    rows = parse_rows("aws", text)
    assert len(rows) == 1 and rows[0].spot_price == 7.8


def test_bad_csv_is_reported() -> None:
    with pytest.raises(CatalogFormatError, match="missing column"):
        parse_rows("x", "a,b\n1,2\n")
    with pytest.raises(CatalogFormatError, match=":2: bad row"):
        parse_rows("x", HEADER + "\nt,,,x,1,,r,z,1,\n")


def _write(d: Path, cloud: str, *rows: str) -> None:
    (d / f"{cloud}.csv").write_text("\n".join((HEADER,) + rows) + "\n")


def test_catalog_dir_override_replaces_bundled_and_enables(tmp_path: Path, skyd_home: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "cat"
    d.mkdir()
    _write(d, "mycloud", "big,A100,8.0,96,1152,,r1,r1a,10.0,3.0", "cpu8,,,8,32,,r1,r1a,0.4,0.1")
    monkeypatch.setenv("SKYD_CATALOG_DIR", str(d))
    clear_catalog_cache()
    cat = load_catalog()
    assert cat.clouds == ("mycloud",) and cat.enabled == {"mycloud"}
    assert len(cat) == 2 and cat.offerings(cloud="aws") == []
    assert load_catalog() is cat  # cached per process
    assert [o.instance_type for o in cat.by_region("mycloud", "r1")] == ["big", "cpu8"]
    assert [o.instance_type for o in cat.cpu_only(4)] == ["cpu8"]
    assert cat.cpu_only(4, exact=True) == ()
    assert cat.age("mycloud") is not None and cat.age("mycloud") < 60  # type: ignore[operator]


def test_the_same_files_are_one_catalog_and_a_changed_file_is_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A catalog is kept for as long as its files are unchanged: two homes reading the same
    bundled files share it, and a file another process wrote (a refresh, an edited override)
    is read at the next load without a restart."""
    import os

    clear_catalog_cache()
    monkeypatch.setenv("SKYD_HOME", str(tmp_path / "home-a"))
    a = load_catalog()
    monkeypatch.setenv("SKYD_HOME", str(tmp_path / "home-b"))
    assert load_catalog() is a  # the bundled files, parsed once
    assert load_catalog(reload=True) is not a

    # another process refreshes AWS into home-b: its file is used from the next load
    refreshed = tmp_path / "home-b" / "catalogs" / "aws" / "20260101T000000000000Z.csv"
    refreshed.parent.mkdir(parents=True)
    refreshed.write_text(HEADER + "\nfresh-type,,,4,16,,us-east-1,use1-az1,0.2,\n")
    cat = load_catalog()
    assert [o.instance_type for o in cat.offerings(cloud="aws")] == ["fresh-type"]
    assert cat.source("aws").kind == "cache"  # type: ignore[union-attr]

    # an override file edited in place (same name, new contents) is read again
    d = tmp_path / "cat"
    d.mkdir()
    _write(d, "mycloud", "small,,,2,8,,r1,r1a,0.1,")
    monkeypatch.setenv("SKYD_CATALOG_DIR", str(d))
    assert [o.instance_type for o in load_catalog().offerings()] == ["small"]
    _write(d, "mycloud", "small,,,2,8,,r1,r1a,0.1,", "large,,,8,32,,r1,r1a,0.4,")
    st = (d / "mycloud.csv").stat()
    os.utime(d / "mycloud.csv", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert [o.instance_type for o in load_catalog().offerings()] == ["small", "large"]
    clear_catalog_cache()


def test_with_extra_is_a_view(bundled: Catalog) -> None:
    local = Offering("local", "local-node", "H100", 2.0, 16.0, 64.0, "local", None, 0.0, None)
    view = bundled.with_extra([local])
    assert "local" in view.enabled and "local" in view.clouds
    assert local in view.by_accelerator("H100", 2)
    assert local not in bundled.by_accelerator("H100", 2)
    assert len(view) == len(bundled) + 1


@pytest.mark.anyio
async def test_refresh_writes_versioned_file_used_over_bundled(skyd_home: Path) -> None:
    async def fetch() -> str:
        return HEADER + "\nnew-type,A100,8.0,96,1152,,us-east-1,use1-az1,1.23,\n"

    register_catalog_fetcher("aws", fetch)
    try:
        path = await refresh_catalog("aws")
    finally:
        unregister_catalog_fetcher("aws")
    assert path.parent == skyd_home / "catalogs" / "aws" and path.suffix == ".csv"
    cat = load_catalog()
    aws = cat.offerings(cloud="aws")
    assert [o.instance_type for o in aws] == ["new-type"]
    assert cat.source("aws").kind == "cache"  # type: ignore[union-attr]
    assert cat.age("aws") is not None and cat.age("aws") < 60  # type: ignore[operator]
    assert cat.source("gcp").kind == "bundled"  # type: ignore[union-attr]
    clear_catalog_cache()


@pytest.mark.anyio
async def test_refresh_errors(skyd_home: Path) -> None:
    with pytest.raises(NotFoundError, match="no catalog fetcher"):
        await refresh_catalog("nowhere")

    async def empty() -> list[Offering]:
        return []

    register_catalog_fetcher("aws", empty)
    try:
        with pytest.raises(SkydError, match="no rows"):
            await refresh_catalog("aws")
    finally:
        unregister_catalog_fetcher("aws")
    assert not (skyd_home / "catalogs" / "aws").exists() or not list((skyd_home / "catalogs" / "aws").glob("*.csv"))
