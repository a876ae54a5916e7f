"""Cached cloud checks: `Cloud.check()` may use the network (credential probes), so its
answer is kept in SQLite (`cloud_checks`, with the time it was taken).

- `skyd check` refreshes every provider (`refresh=True`);
- a launch reads the cache and probes only the providers whose entry is missing or older
  than the cloud's `check_ttl_s`;
- a provider that refuses the credentials while provisioning is recorded as failed at once
  (`record_failure`), so the next plans leave it out until a check says otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import anyio

from skyd.clouds.base import get_cloud, registered_clouds
from skyd.errors import SkydError
from skyd.pipeline import schema as _schema  # noqa: F401 - registers the tables

CHECK_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    reason: str
    checked_at: float
    cached: bool = False


async def probe(name: str) -> CheckResult:
    """Run one provider's check now, bounded in time; any failure is a disabled cloud."""
    try:
        cloud = get_cloud(name)
        with anyio.fail_after(CHECK_TIMEOUT_S):
            ok, reason = await cloud.check()
    except TimeoutError:
        ok, reason = False, f"check timed out after {CHECK_TIMEOUT_S:.0f}s"
    except SkydError as e:
        ok, reason = False, str(e)
    except Exception as e:  # noqa: BLE001 - a broken provider is reported, not fatal
        ok, reason = False, f"check failed: {type(e).__name__}: {e}"
    return CheckResult(bool(ok), str(reason), time.time())


def _ttl(name: str) -> float:
    try:
        return float(get_cloud(name).check_ttl_s)
    except SkydError:
        return 0.0


async def _cached(store: Any) -> dict[str, CheckResult]:
    rows = await store.fetchall("SELECT cloud, ok, reason, checked_at FROM cloud_checks")
    return {
        r["cloud"]: CheckResult(bool(r["ok"]), r["reason"] or "", float(r["checked_at"]), True)
        for r in rows
    }


async def _save(store: Any, results: dict[str, CheckResult]) -> None:
    if not results:
        return
    async with store.tx() as db:
        for name, r in results.items():
            await db.execute(
                "INSERT INTO cloud_checks (cloud, ok, reason, checked_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(cloud) DO UPDATE SET ok = excluded.ok, reason = excluded.reason,"
                " checked_at = excluded.checked_at",
                (name, int(r.ok), r.reason, r.checked_at),
            )


async def checks(
    store: Any | None, names: Iterable[str] | None = None, *, refresh: bool = False
) -> dict[str, CheckResult]:
    """The check of every provider in `names` (default: all): from the cache when fresh,
    else probed now (concurrently) and written back in one transaction. Without a store
    (tests, tools), every provider is probed."""
    wanted = sorted(set(names) if names is not None else registered_clouds())
    now = time.time()
    have = await _cached(store) if store is not None else {}
    out: dict[str, CheckResult] = {}
    stale: list[str] = []
    for name in wanted:
        hit = have.get(name)
        if not refresh and hit is not None and now - hit.checked_at < _ttl(name):
            out[name] = hit
        else:
            stale.append(name)
    fresh: dict[str, CheckResult] = {}

    async def one(name: str) -> None:
        fresh[name] = await probe(name)

    async with anyio.create_task_group() as tg:
        for name in stale:
            tg.start_soon(one, name)
    if store is not None:
        await _save(store, fresh)
    out.update(fresh)
    return out


async def record_failure(store: Any | None, name: str, reason: str) -> None:
    """A provider refused the credentials while provisioning: cache it as disabled."""
    if store is not None:
        await _save(store, {name: CheckResult(False, reason, time.time())})


def enabled(results: dict[str, CheckResult]) -> set[str]:
    return {name for name, r in results.items() if r.ok}
