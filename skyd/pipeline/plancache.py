"""A launch plans once: the plan a dry run showed is kept, by id, for the launch that names it.

`skyd launch` in a terminal shows the plan (a dry run) and asks before making a cluster;
the launch it then submits carries the shown plan's id (``plan_id`` in the payload). The
daemon runs that plan rather than solving again, as long as what it was solved over is
unchanged: the same task (its normalized form, secrets redacted), objective and catalog
directory -- that is the id -- and the same catalogs, enabled infras and provider checks
(the fingerprint). Otherwise the launch plans again and says why in its log.

Kept in memory only (at most :data:`MAX_PLANS`, for :data:`TTL_S`): a plan is derived
data, never state to recover -- a daemon restarted in between simply plans again.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyd.models.task import Task

TTL_S = 900.0
MAX_PLANS = 64

_lock = threading.Lock()
_shown: OrderedDict[str, tuple[float, str, Any]] = OrderedDict()  # id -> (time, fingerprint, plan)


def plan_id(task: Task, minimize: str, catalog_dir: str | None) -> str:
    """The id of a task's plan: what the plan depends on besides the catalogs."""
    doc = [task.to_normalized(redact_secrets=True), minimize, catalog_dir or ""]
    raw = json.dumps(doc, sort_keys=True, default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def fingerprint(catalog: Any, base: Any, extra: list[Any]) -> str:
    """What a plan was solved over: the enabled infras, each catalog file (path, size,
    modification time), the loaded catalog itself, and the dynamic infras' offerings."""
    parts: list[Any] = [sorted(catalog.enabled), id(base), len(catalog), repr(extra)]
    for cloud in catalog.clouds:
        src = catalog.source(cloud)
        if src is None:
            continue
        stat: tuple[int, int] | None = None
        if src.path:
            try:
                st = os.stat(src.path)
                stat = (st.st_mtime_ns, st.st_size)
            except OSError:
                stat = None
        parts.append((cloud, src.kind, src.path, stat))
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def remember(pid: str, fp: str, plan: Any) -> None:
    now = time.monotonic()
    with _lock:
        _shown[pid] = (now, fp, plan)
        _shown.move_to_end(pid)
        while len(_shown) > MAX_PLANS:
            _shown.popitem(last=False)


def recall(pid: str, fp: str) -> tuple[Any | None, str]:
    """(the plan shown under ``pid``, "") when it still holds; else (None, why not)."""
    now = time.monotonic()
    with _lock:
        got = _shown.get(pid)
        if got is None or now - got[0] > TTL_S:
            _shown.pop(pid, None)
            return None, "the plan shown is no longer kept"
        if got[1] != fp:
            return None, "the catalogs or enabled infras changed since it was shown"
        return got[2], ""


def forget_all() -> None:
    with _lock:
        _shown.clear()
