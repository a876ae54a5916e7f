"""Price catalogs: loaded once per process, indexed so every lookup is a dict access.

Where a cloud's catalog comes from (first match wins):

1. ``SKYD_CATALOG_DIR`` (or ``load_catalog(dir=...)``): ``<cloud>.csv`` files there replace the
   bundled catalogs entirely, and exactly those clouds count as enabled for planning.
2. ``$SKYD_HOME/catalogs/<cloud>/<timestamp>.csv``: the newest version written by
   :func:`skyd.clouds.catalog_refresh.refresh_catalog`.
3. The bundled ``skyd/clouds/data/<cloud>.csv``.

Without an override, the enabled clouds default to the implemented ones (:data:`IMPLEMENTED`);
callers that know which clouds have credentials narrow it with :meth:`Catalog.with_enabled`.
Dynamic infras (``local``, ``ssh`` pools, ``kubernetes``) add rows with
:meth:`Catalog.with_extra` and are enabled automatically.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from skyd import settings
from skyd.clouds.catalog_csv import canonical_name, parse_rows
from skyd.clouds.offering import Offering

DATA_DIR = Path(__file__).parent / "data"

class _Implemented(Mapping[str, bool]):
    """cloud -> whether skyd has a provider for it, derived from the provider list
    (skyd.cloudnames): every bundled catalog's cloud, plus every provider. False = "catalog
    only": shown by show-gpus and planned by --dryrun under SKYD_CATALOG_DIR, not enabled by
    default."""

    def _names(self) -> set[str]:
        from skyd.cloudnames import REGISTERED

        return {p.stem for p in DATA_DIR.glob("*.csv")} | set(REGISTERED)

    def __getitem__(self, cloud: str) -> bool:
        from skyd.cloudnames import REGISTERED

        if cloud not in self._names():
            raise KeyError(cloud)
        return cloud in REGISTERED

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._names()))

    def __len__(self) -> int:
        return len(self._names())


IMPLEMENTED: Mapping[str, bool] = _Implemented()

# When the bundled rows were taken from the providers' public price lists.
BUNDLED_DATES: dict[str, str] = {
    "aws": "2026-11-30",
    "gcp": "2026-11-30",
    "runpod": "2026-11-30",
    "lambda": "2026-11-30",
}
_AMD_NOTES_DATE = "2026-11-01"


@dataclass(frozen=True)
class CatalogSource:
    cloud: str
    kind: str  # "override" | "cache" | "bundled" | "dynamic"
    path: str | None
    timestamp: float | None  # when the data was taken (epoch seconds)


_EMPTY: tuple[Offering, ...] = ()


class _Index:
    """Dict indexes over a fixed set of offerings. Values are tuples (never mutated)."""

    __slots__ = ("rows", "by_acc", "by_acc_count", "by_type", "by_region", "by_cloud", "cpu_by_vcpus",
                 "max_count")

    def __init__(self, rows: Sequence[Offering]) -> None:
        by_acc: dict[str, list[Offering]] = {}
        by_acc_count: dict[tuple[str, float], list[Offering]] = {}
        by_type: dict[str, list[Offering]] = {}
        by_region: dict[tuple[str, str], list[Offering]] = {}
        by_cloud: dict[str, list[Offering]] = {}
        cpu: dict[float, list[Offering]] = {}
        for o in rows:
            a = o.accelerator
            if a is None:
                cpu.setdefault(o.vcpus, []).append(o)
            else:
                by_acc.setdefault(a, []).append(o)
                by_acc_count.setdefault((a, o.accelerator_count), []).append(o)
            by_type.setdefault(o.instance_type, []).append(o)
            by_region.setdefault((o.cloud, o.region), []).append(o)
            by_cloud.setdefault(o.cloud, []).append(o)
        self.rows = tuple(rows)
        self.by_acc = {k: tuple(v) for k, v in by_acc.items()}
        self.by_acc_count = {k: tuple(v) for k, v in by_acc_count.items()}
        self.by_type = {k: tuple(v) for k, v in by_type.items()}
        self.by_region = {k: tuple(v) for k, v in by_region.items()}
        self.by_cloud = {k: tuple(v) for k, v in by_cloud.items()}
        self.cpu_by_vcpus = {k: tuple(v) for k, v in sorted(cpu.items())}


class Catalog:
    """Indexed offerings of every known cloud plus the set enabled for planning."""

    def __init__(
        self,
        offerings: Sequence[Offering] | _Index,
        *,
        enabled: Iterable[str] | None = None,
        sources: dict[str, CatalogSource] | None = None,
        extra: _Index | None = None,
    ) -> None:
        self._base = offerings if isinstance(offerings, _Index) else _Index(offerings)
        self._extra = extra
        self._sources = dict(sources or {})
        clouds = set(self._base.by_cloud) | set(self._sources)
        if extra is not None:
            clouds |= set(extra.by_cloud)
        self._clouds = tuple(sorted(clouds))
        if enabled is None:
            enabled = [c for c in self._clouds if IMPLEMENTED.get(c, False)]
        self._enabled = frozenset(enabled)
        names = set(self._base.by_acc) | (set(extra.by_acc) if extra else set())
        self._canon = {n.lower(): n for n in names}

    # -- views -------------------------------------------------------------------------
    def with_extra(self, offerings: Sequence[Offering]) -> Catalog:
        """A view with dynamic-infra rows added (their clouds enabled). Base indexes are shared."""
        rows = list(offerings)
        if self._extra is not None:
            rows = list(self._extra.rows) + rows
        srcs = dict(self._sources)
        for o in rows:
            srcs.setdefault(o.cloud, CatalogSource(o.cloud, "dynamic", None, time.time()))
        return Catalog(self._base, enabled=self._enabled | {o.cloud for o in rows}, sources=srcs,
                       extra=_Index(rows))

    def with_enabled(self, clouds: Iterable[str]) -> Catalog:
        """The same rows, planning restricted to ``clouds`` (e.g. those with credentials)."""
        return Catalog(self._base, enabled=clouds, sources=self._sources, extra=self._extra)

    # -- properties ----------------------------------------------------------------------
    @property
    def clouds(self) -> tuple[str, ...]:
        return self._clouds

    @property
    def enabled(self) -> frozenset[str]:
        return self._enabled

    def __len__(self) -> int:
        return len(self._base.rows) + (len(self._extra.rows) if self._extra else 0)

    def source(self, cloud: str) -> CatalogSource | None:
        return self._sources.get(cloud)

    def age(self, cloud: str) -> float | None:
        """Seconds since the cloud's catalog data was taken (None if unknown)."""
        s = self._sources.get(cloud)
        if s is None or s.timestamp is None:
            return None
        return max(0.0, time.time() - s.timestamp)

    # -- lookups (dict accesses) -------------------------------------------------------
    def canonical_accelerator(self, name: str) -> str | None:
        """Canonical spelling of an accelerator name, case-insensitive; None if unknown."""
        n = canonical_name(name)
        return self._canon.get(n.lower()) or self._canon.get(name.lower())

    def accelerator_names(self) -> list[str]:
        return sorted(self._canon.values())

    def _get(self, attr: str, key: object) -> tuple[Offering, ...]:
        base: tuple[Offering, ...] = getattr(self._base, attr).get(key, _EMPTY)
        if self._extra is None:
            return base
        more: tuple[Offering, ...] = getattr(self._extra, attr).get(key, _EMPTY)
        return base + more if more else base

    def by_accelerator(self, name: str, count: float | None = None) -> tuple[Offering, ...]:
        if count is None:
            return self._get("by_acc", name)
        return self._get("by_acc_count", (name, float(count)))

    def by_instance_type(self, instance_type: str) -> tuple[Offering, ...]:
        return self._get("by_type", instance_type)

    def by_region(self, cloud: str, region: str) -> tuple[Offering, ...]:
        return self._get("by_region", (cloud, region))

    def by_cloud(self, cloud: str) -> tuple[Offering, ...]:
        return self._get("by_cloud", cloud)

    def cpu_only(self, min_vcpus: float = 0.0, exact: bool = False) -> tuple[Offering, ...]:
        """CPU-only rows with ``vcpus == min_vcpus`` (exact) or ``>= min_vcpus``."""
        if exact:
            return self._get("cpu_by_vcpus", float(min_vcpus))
        out: list[Offering] = []
        for idx in (self._base, self._extra):
            if idx is None:
                continue
            for v, rows in idx.cpu_by_vcpus.items():
                if v >= min_vcpus:
                    out.extend(rows)
        return tuple(out)

    def all_rows(self) -> tuple[Offering, ...]:
        return self._base.rows + (self._extra.rows if self._extra else ())

    def offerings(
        self,
        cloud: str | None = None,
        accelerator: str | None = None,
        instance_type: str | None = None,
        region: str | None = None,
    ) -> list[Offering]:
        """Rows matching every given filter, starting from the narrowest index."""
        if accelerator is not None:
            acc = self.canonical_accelerator(accelerator) or accelerator
            rows: Sequence[Offering] = self.by_accelerator(acc)
        elif instance_type is not None:
            rows = self.by_instance_type(instance_type)
        elif cloud is not None and region is not None:
            rows = self.by_region(cloud, region)
        elif cloud is not None:
            rows = self.by_cloud(cloud)
        else:
            rows = self.all_rows()
        return [
            o for o in rows
            if (cloud is None or o.cloud == cloud)
            and (instance_type is None or o.instance_type == instance_type)
            and (region is None or o.region == region)
        ]


# -- loading ------------------------------------------------------------------------------
# A catalog is cached by what it was read from: each source file's path, size and mtime. A
# catalog refreshed by another process (`skyd gpus refresh`) is therefore read at the next
# plan, and the same files read in another home (the bundled ones) are not parsed twice.
_SourceKey = tuple[str, str, str | None, float | None, int, int]
_cache: dict[tuple[bool, tuple[_SourceKey, ...]], Catalog] = {}
_CACHED = 4  # catalogs kept (the newest used); older ones are dropped
_lock = threading.Lock()


def catalog_cache_dir() -> Path:
    from skyd import paths

    return paths.home() / "catalogs"


def _parse_ts(stem: str) -> float | None:
    try:
        return datetime.strptime(stem, "%Y%m%dT%H%M%S%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


@functools.lru_cache(maxsize=64)
def _date_ts(d: str) -> float:
    return datetime.strptime(d, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()


def newest_cached(cloud: str, cache: Path | None = None) -> Path | None:
    d = (cache if cache is not None else catalog_cache_dir()) / cloud
    if not d.is_dir():
        return None
    files = sorted(p for p in d.glob("*.csv") if _parse_ts(p.stem) is not None)
    return files[-1] if files else None


@functools.lru_cache(maxsize=1)
def _bundled_clouds() -> tuple[str, ...]:
    return tuple(sorted(f.stem for f in DATA_DIR.glob("*.csv")))  # part of the install


def catalog_files(dir: str | os.PathLike[str] | None = None) -> tuple[list[CatalogSource], bool]:
    """Which file each cloud's catalog comes from; True when it is an override dir."""
    override = dir if dir is not None else settings.CATALOG_DIR.get()
    if override is not None:
        p = Path(override)
        return [
            CatalogSource(f.stem, "override", str(f), f.stat().st_mtime)
            for f in sorted(p.glob("*.csv"))
        ], True
    out: list[CatalogSource] = []
    bundled = set(_bundled_clouds())
    cache = catalog_cache_dir()
    refreshed = {e.name for e in os.scandir(cache) if e.is_dir()} if cache.is_dir() else set()
    for cloud in sorted(bundled | refreshed):
        cached = newest_cached(cloud, cache) if cloud in refreshed else None
        if cached is not None:
            out.append(CatalogSource(cloud, "cache", str(cached), _parse_ts(cached.stem)))
            continue
        if cloud in bundled:
            out.append(CatalogSource(cloud, "bundled", str(DATA_DIR / f"{cloud}.csv"),
                                     _date_ts(BUNDLED_DATES.get(cloud, _AMD_NOTES_DATE))))
    return out, False


def _read(src: CatalogSource) -> list[Offering]:
    assert src.path is not None
    with open(src.path, newline="", encoding="utf-8") as fh:
        import csv

        return parse_rows(src.cloud, csv.reader(fh), source=src.path)


def _source_key(src: CatalogSource) -> _SourceKey:
    try:
        st = os.stat(src.path) if src.path is not None else None
    except OSError:
        st = None  # gone since it was listed: reading it fails as before
    return (src.cloud, src.kind, src.path, src.timestamp,
            st.st_size if st else -1, st.st_mtime_ns if st else -1)


def load_catalog(dir: str | os.PathLike[str] | None = None, *, reload: bool = False) -> Catalog:
    """The catalog of the override dir (or SKYD_HOME's refreshed and the bundled files),
    read once per process for as long as its files are unchanged."""
    override = dir if dir is not None else settings.CATALOG_DIR.get()
    sources, is_override = catalog_files(override)
    key = (is_override, tuple(_source_key(s) for s in sources))
    with _lock:
        cat = None if reload else _cache.pop(key, None)
        if cat is None:
            rows: list[Offering] = []
            for s in sources:
                rows.extend(_read(s))
            enabled = [s.cloud for s in sources] if is_override else None
            cat = Catalog(rows, enabled=enabled, sources={s.cloud: s for s in sources})
        _cache[key] = cat  # the newest used last
        while len(_cache) > _CACHED:
            del _cache[next(iter(_cache))]
        return cat


def clear_catalog_cache() -> None:
    with _lock:
        _cache.clear()
