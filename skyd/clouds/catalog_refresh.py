"""Refreshing a cloud's catalog from its pricing API (``skyd catalog refresh [CLOUD]``).

A provider module registers an async fetcher returning the catalog as vms.csv text or as a
list of :class:`Offering`. :func:`refresh_catalog` calls it, validates the rows, and writes a
new version ``$SKYD_HOME/catalogs/<cloud>/<UTC timestamp>.csv`` (atomically), which
:func:`skyd.clouds.catalog.load_catalog` then prefers over the bundled file. Old versions
beyond :data:`KEEP_VERSIONS` are deleted.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import anyio

from skyd.clouds.catalog import catalog_cache_dir, clear_catalog_cache
from skyd.clouds.catalog_csv import CatalogFormatError, offerings_to_csv, parse_rows
from skyd.clouds.offering import Offering
from skyd.errors import InvalidSpecError, NotFoundError, SkydError

Fetcher = Callable[[], Awaitable[str | list[Offering]]]

KEEP_VERSIONS = 5
_fetchers: dict[str, Fetcher] = {}


def register_catalog_fetcher(cloud: str, fn: Fetcher) -> None:
    """Register (or replace) the pricing fetcher for ``cloud``."""
    _fetchers[cloud] = fn


def unregister_catalog_fetcher(cloud: str) -> None:
    _fetchers.pop(cloud, None)


def catalog_fetchers() -> list[str]:
    _load_providers()
    return sorted(_fetchers)


def _load_providers(only: str | None = None) -> None:
    """Providers register their fetchers when loaded (e.g. ``aws``): load them first."""
    from skyd.clouds.base import get_cloud, registered_clouds

    for name in [only] if only else registered_clouds():
        if name in _fetchers:
            continue
        try:
            get_cloud(name)
        except Exception:  # noqa: BLE001, S112 - a provider that fails to load has no fetcher
            continue


def _write_version(cloud: str, text: str) -> Path:
    d = catalog_cache_dir() / cloud
    d.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    final = d / f"{stamp}.csv"
    tmp = d / f".{stamp}.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, final)
    versions = sorted(p for p in d.glob("*.csv"))
    for old in versions[:-KEEP_VERSIONS]:
        old.unlink(missing_ok=True)
    return final


async def refresh_catalog(cloud: str) -> Path:
    """Fetch ``cloud``'s prices and store them as a new catalog version; returns its path."""
    if cloud not in _fetchers:
        _load_providers(cloud)
    fn = _fetchers.get(cloud)
    if fn is None:
        have = ", ".join(catalog_fetchers()) or "none"
        raise NotFoundError(
            f"no catalog fetcher for cloud {cloud!r} (clouds with one: {have})",
            field="cloud",
            hint="the bundled catalog stays in use; a provider module registers a fetcher",
        )
    data = await fn()
    if isinstance(data, str):
        text = data
    else:
        text = offerings_to_csv(data)

    def _validate_and_write() -> Path:
        try:
            rows = parse_rows(cloud, text, source=f"{cloud} fetcher")
        except CatalogFormatError as e:
            raise InvalidSpecError(f"catalog fetched for {cloud!r} is malformed: {e}") from None
        if not rows:
            raise SkydError(f"catalog fetched for {cloud!r} has no rows; keeping the previous one")
        path = _write_version(cloud, text)
        clear_catalog_cache()
        return path

    return await anyio.to_thread.run_sync(_validate_and_write)
