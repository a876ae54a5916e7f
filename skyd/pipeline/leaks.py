"""The leak pass: provisioning attempts a killed daemon left half made.

A cluster row that is only a partial handle (cloud, region, zone, tag; no handle) and
whose cluster lock nobody holds is an attempt nobody is finishing: its provider is asked
to remove whatever carries the tag at that location (`Provisioner.forget`), then the row
goes. Runs at daemon start, in `status -r`, and in `down` of a half-made cluster. A launch
resumed after the restart removes its own leftovers first and provisions afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from skyd.pipeline import clusters_db as cdb
from skyd.pipeline.locks import cluster_lock, is_busy

log = logging.getLogger("skyd.leaks")


async def leak_pass(store: Any, names: Iterable[str] | None = None) -> list[str]:
    """Remove every idle half-made attempt (of `names`, default all); returns the clusters
    cleaned. One failure is logged and left for the next pass."""
    only = set(names) if names is not None else None
    cleaned: list[str] = []
    for partial in await cdb.half_made(store):
        name = partial.cluster_name
        if (only is not None and name not in only) or is_busy(name):
            continue
        async with cluster_lock(name):
            row = await cdb.get_cluster(store, name)
            current = cdb.partial_of(row) if row else None
            if current is None:
                continue
            from skyd.pipeline.provision import forget  # with the first leak, not at start

            try:
                await forget(store, current, log.info)
            except Exception as e:  # noqa: BLE001 - the next pass (or `down`) retries
                log.warning("leak pass: %s on %s: %s", name, current.describe(), e)
                continue
            log.info("leak pass: removed what an interrupted provisioning of %s left on %s",
                     name, current.describe())
            cleaned.append(name)
    if only is None:
        await orphan_pass(store)
    return cleaned


async def orphan_pass(store: Any) -> list[str]:
    """Objects that providers labelled for clusters with no row at all: every loaded
    provider that can list its objects by label (``sweep_orphans(known_tags)``) removes the
    ones whose tag no cluster row carries. Partial rows are written before any create, so a
    launch in flight is never swept."""
    from skyd.clouds.base import loaded_clouds

    sweepers = []
    for c in loaded_clouds():
        try:
            prov = c.provisioner()
        except NotImplementedError:  # a provider that only plans (no provisioner) made nothing
            continue
        if hasattr(prov, "sweep_orphans"):
            sweepers.append(prov)
    if not sweepers:
        return []
    rows = await store.fetchall("SELECT name, tag FROM clusters")
    known = {str(r["tag"] or r["name"]) for r in rows} | {str(r["name"]) for r in rows}
    out: list[str] = []
    for p in sweepers:
        try:
            out += await p.sweep_orphans(known)  # type: ignore[attr-defined]
        except Exception as e:  # noqa: BLE001 - the next pass retries
            log.warning("orphan pass: %s", e)
    for what in out:
        log.info("orphan pass: removed objects of %s (no cluster row)", what)
    return out
