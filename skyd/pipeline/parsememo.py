"""A request's task is parsed once: its submit-time check hands the DAG it parsed to the
request's handler.

The daemon checks a launch (or exec, or dry run) when it is submitted -- the YAML parsed,
overrides applied, the precheck passed (skyd.pipeline.checks) -- and the handler, started
a moment later, loads the same task again. The check now keeps what it parsed, under a key
both sides compute alike: the payload as stored (secret values split out,
skyd.daemon.request_secrets), the secret values themselves, the precheck flag and the
request's config; the handler takes it (once) instead of parsing again. Anything that
differs -- another payload, other secret values, another config, a daemon restarted in
between (a resumed request), more than :data:`TTL_S` seconds -- and the handler parses as
before, so the memo can save work but never change what is loaded.

Held in memory only, at most :data:`MAX_KEPT` DAGs for :data:`TTL_S` seconds each.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from typing import Any

TTL_S = 30.0
MAX_KEPT = 16

_lock = threading.Lock()
_kept: OrderedDict[str, tuple[float, Any]] = OrderedDict()
_counts = {"parsed": 0, "handed_over": 0}


def key(payload: dict[str, Any], precheck: bool) -> str:
    """The same for a request's check (the client's payload) and its handler (the stored
    payload with the secret values back)."""
    from skyd import config
    from skyd.daemon import request_secrets as rs

    if rs.SECRET_REF in payload:  # the handler's payload: stored, secret values attached
        clean = {k: v for k, v in payload.items()
                 if k not in (rs.SECRET_REF, rs.TASK_SECRETS, "secrets")}
        held: Any = {"overrides": payload.get("secrets") or {},
                     "tasks": payload.get(rs.TASK_SECRETS) or []}
    else:  # the client's payload as checked (or a stored one that had no secrets)
        clean, held = rs.split_payload(payload)
        clean.pop("secrets", None)
    doc = [clean, held, precheck, config.current().data]
    raw = json.dumps(doc, sort_keys=True, default=str).encode()
    return hashlib.sha256(raw).hexdigest()


def parsed() -> None:
    with _lock:
        _counts["parsed"] += 1


def keep(k: str, dag: Any) -> None:
    """Keep the DAG a check parsed (the check holds no reference to it afterwards)."""
    now = time.monotonic()
    with _lock:
        _kept[k] = (now, dag)
        _kept.move_to_end(k)
        while len(_kept) > MAX_KEPT:
            _kept.popitem(last=False)


def take(k: str) -> Any | None:
    """The DAG kept under ``k`` (removed: it is the handler's alone), or None."""
    now = time.monotonic()
    with _lock:
        for old in [x for x, (t, _) in _kept.items() if now - t > TTL_S]:
            del _kept[old]
        got = _kept.pop(k, None)
        if got is None:
            return None
        _counts["handed_over"] += 1
        return got[1]


def counts() -> dict[str, int]:
    """How many DAGs were parsed from a payload, and how many a check handed to its handler."""
    with _lock:
        return dict(_counts)
