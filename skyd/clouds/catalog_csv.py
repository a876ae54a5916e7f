"""Parse SkyPilot vms.csv-style catalogs into :class:`Offering` rows.

Columns: InstanceType, AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB, GpuInfo, Region,
AvailabilityZone, Price, SpotPrice. Prices are USD/hour per instance; empty = not offered.

Two quirks are handled here, in one place:

* **Accelerator names** are canonicalised through the GPU-name table
  (:func:`skyd.clouds.gpunames.catalog_name`: provider spellings such as Crusoe's
  ``MI355X_288GB``) so that a request for ``MI355X`` matches every cloud that rents one.
  Card variants stay apart, as in SkyPilot's catalogs: ``H100`` (PCIe), ``H100-SXM`` and
  ``H100-NVL`` are three names.
* **Split rows** (GCP's catalog). A provider whose catalog lists machine types (no
  accelerator, host price only) apart from GPU-only rows (no instance type, GPU price only)
  states how to pair them on its Cloud class (``catalog_split_rows``, a
  :class:`skyd.clouds.base.SplitRows`; GCP's is ``skyd/clouds/gcp/catalog.py``). A GPU-only
  row is paired with the host machine type that carries it in that zone; the offering's
  price is host + GPU; an accelerator with no host there gets the provider's fallback host.
  Machine types that only exist as GPU hosts are not offered as CPU-only instances. GPU-only
  rows of a provider that states no pairing are a format error.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from skyd.clouds.gpunames import catalog_name
from skyd.clouds.offering import Offering

if TYPE_CHECKING:
    from skyd.clouds.base import SplitRows

COLUMNS = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "GpuInfo",
    "Region",
    "AvailabilityZone",
    "Price",
    "SpotPrice",
)

# Provider spellings (RunPod's ``AMD Instinct MI300X OAM``, Crusoe's ``MI355X_288GB``, DO's
# ``amd_mi300x``) are read through the one GPU-name table, skyd.clouds.gpunames; card variants
# (H100 / H100-SXM / H100-NVL) stay distinct.

_MIB_RE = re.compile(r"'SizeInMiB':\s*([0-9.]+)")


def canonical_name(name: str) -> str:
    return catalog_name(name) if name else name


def _f(s: str) -> float | None:
    return float(s) if s else None


class CatalogFormatError(ValueError):
    pass


def parse_rows(cloud: str, text_or_rows: str | Iterable[list[str]], source: str = "") -> list[Offering]:
    """Parse one cloud's CSV (text or pre-split rows) into offerings, GCP pairing included."""
    rows: Iterator[list[str]]
    if isinstance(text_or_rows, str):
        rows = csv.reader(io.StringIO(text_or_rows))
    else:
        rows = iter(text_or_rows)
    header = next(rows, None)
    if header is None:
        return []
    header = [h.strip().lstrip("\ufeff") for h in header]
    try:
        idx = [header.index(c) for c in COLUMNS]
    except ValueError as e:
        raise CatalogFormatError(f"{source or cloud}: missing column ({e}); need {','.join(COLUMNS)}") from None
    i_it, i_an, i_ac, i_cpu, i_mem, i_gi, i_reg, i_az, i_pr, i_sp = idx
    out: list[Offering] = []
    gpu_only: list[list[str]] = []
    hosts: dict[tuple[str, str], list[str]] = {}  # (instance_type, zone) -> row
    seen: dict[tuple[str, str, str, str | None], int] = {}
    all_rows = list(rows)
    split = _split_rows(cloud, source) if any(r and not r[i_it] for r in all_rows) else None
    host_families = split.host_families if split is not None else ("\0",)
    for lineno, r in enumerate(all_rows, start=2):
        if not r:
            continue
        try:
            itype = r[i_it]
            acc = r[i_an]
            if not itype:
                gpu_only.append(r)
                continue
            if not acc and itype.startswith(host_families):
                hosts[(itype, r[i_az])] = r
                continue
            region = r[i_reg]
            zone = r[i_az] or None
            price = _f(r[i_pr])
            spot = _f(r[i_sp])
            key = (itype, region, zone or "", acc or None)
            prev = seen.get(key)
            if prev is not None:  # duplicate row (e.g. AWS p4de): keep one, merge prices
                o = out[prev]
                out[prev] = Offering(
                    o.cloud, o.instance_type, o.accelerator, o.accelerator_count, o.vcpus,
                    o.memory_gib, o.region, o.zone,
                    _min(o.price, price), _min(o.spot_price, spot), o.accelerator_memory_gib,
                )
                continue
            amem = None
            if acc:
                acc = canonical_name(acc)
                gi = r[i_gi]
                if gi:
                    m = _MIB_RE.search(gi)
                    if m:
                        amem = float(m.group(1)) / 1024.0
                count = float(r[i_ac] or 0.0)
            else:
                count = 0.0
            seen[key] = len(out)
            out.append(
                Offering(
                    cloud, itype, acc or None, count, float(r[i_cpu] or 0.0),
                    float(r[i_mem] or 0.0), region, zone, price, spot, amem,
                )
            )
        except (IndexError, ValueError) as e:
            raise CatalogFormatError(f"{source or cloud}:{lineno}: bad row {r!r}: {e}") from None
    if gpu_only and split is not None:
        out.extend(_pair_gpu_rows(cloud, split, gpu_only, hosts, idx))
    return out


def _split_rows(cloud: str, source: str) -> SplitRows:
    from skyd.clouds.base import cloud_class

    cls = cloud_class(cloud)
    split = cls.catalog_split_rows if cls is not None else None
    if split is None:
        raise CatalogFormatError(
            f"{source or cloud}: rows without an InstanceType (GPU-only rows), but the "
            f"{cloud!r} provider states no pairing of GPU rows with host machine types "
            "(Cloud.catalog_split_rows)")
    return split


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _pair_gpu_rows(
    cloud: str, split: SplitRows, gpu_rows: list[list[str]],
    hosts: dict[tuple[str, str], list[str]], idx: list[int],
) -> list[Offering]:
    _, i_an, i_ac, _, _, i_gi, i_reg, i_az, i_pr, i_sp = idx
    i_cpu, i_mem = idx[3], idx[4]
    out: list[Offering] = []
    for r in gpu_rows:
        acc = canonical_name(r[i_an])
        count = float(r[i_ac] or 0.0)
        zone = r[i_az]
        gprice, gspot = _f(r[i_pr]), _f(r[i_sp])
        m = _MIB_RE.search(r[i_gi] or "")
        amem = float(m.group(1)) / 1024.0 if m else None
        host_types = split.gpu_hosts.get((acc, int(count)))
        if host_types is None:
            name, cpus, mem, n1p, n1s = split.fallback_host
            out.append(
                Offering(cloud, name, acc, count, cpus, mem, r[i_reg], zone or None,
                         _add(gprice, n1p), _add(gspot, n1s), amem)
            )
            continue
        for ht in host_types:
            h = hosts.get((ht, zone))
            if h is not None:
                cpus, mem = float(h[i_cpu] or 0.0), float(h[i_mem] or 0.0)
                hp, hs = _f(h[i_pr]), _f(h[i_sp])
            elif ht in split.missing_hosts:
                cpus, mem, hp0, hs0 = split.missing_hosts[ht]
                hp, hs = hp0, hs0
            else:
                continue  # the host type is not offered in this zone
            out.append(
                Offering(cloud, ht, acc, count, cpus, mem, r[i_reg], zone or None,
                         _add(gprice, hp), _add(gspot, hs), amem)
            )
    return out


def offerings_to_csv(offerings: Iterable[Offering]) -> str:
    """Write offerings back in vms.csv columns (used by catalog refresh and the benchmark)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for o in offerings:
        w.writerow([
            o.instance_type, o.accelerator or "", _num(o.accelerator_count if o.accelerator else None),
            _num(o.vcpus), _num(o.memory_gib), o.accelerator or "", o.region, o.zone or "",
            _num(o.price), _num(o.spot_price),
        ])
    return buf.getvalue()


def _num(x: float | None) -> str:
    return "" if x is None else repr(float(x))
