"""skyd debug-dump: one zip with what a bug report needs (as ``sky debug-dump``): versions,
the daemon's log tail, the recent requests (ids, verbs, status, errors) and their logs,
clusters, and the merged config with secret-looking values redacted. Secret values never
reach the daemon's database or logs in plain text, so none are in the dump either."""

from __future__ import annotations

import argparse
import sys
from typing import Any

REDACT_WORDS = ("key", "token", "secret", "password", "credential")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("debug-dump", help="write a zip of logs and state for a bug report",
                       description="Collect versions, the daemon log, recent requests and "
                                   "their logs, clusters and the config (secrets redacted).")
    p.add_argument("-o", "--output-path", dest="path", metavar="FILE.zip",
                   help="where to write (default: ./skyd-debug-<time>.zip)")
    p.add_argument("--requests", type=int, default=20, metavar="N",
                   help="logs of the N most recent requests (default 20)")
    p.set_defaults(func=run)


def _redact(v: Any, key: str = "") -> Any:
    if isinstance(v, dict):
        return {k: _redact(x, str(k)) for k, x in v.items()}
    if isinstance(v, list):
        return [_redact(x, key) for x in v]
    if any(w in key.lower() for w in REDACT_WORDS) and v not in (None, ""):
        return "<redacted>"
    return v


def _tail(path: Any, limit: int = 1 << 20) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read()
    except OSError:
        return b""


def run(args: argparse.Namespace) -> int:
    import json
    import platform
    import time
    import zipfile
    from pathlib import Path

    from skyd import __version__, paths

    out = Path(args.path or f"skyd-debug-{time.strftime('%Y%m%d-%H%M%S')}.zip")
    info: dict[str, Any] = {"skyd": __version__, "python": sys.version, "platform": platform.platform(),
                            "skyd_home": str(paths.home()), "socket": str(paths.socket_path())}
    state: dict[str, Any] = {}
    try:
        from skyd.sdk import Client

        with Client(autostart=False, timeout=10) as c:
            state["clusters"] = c.get("/v1/status")
            state["requests"] = c.get("/v1/requests", {"limit": 200})
    except Exception as e:  # noqa: BLE001 - a dump of a broken install is the point
        state["daemon_error"] = f"{type(e).__name__}: {e}"
    try:
        from skyd import config

        conf: Any = _redact(config.load(config.caller_sources(None)).data)
    except Exception as e:  # noqa: BLE001
        conf = {"error": str(e)}
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("info.json", json.dumps(info, indent=2))
        z.writestr("state.json", json.dumps(state, indent=2, default=str))
        z.writestr("config.json", json.dumps(conf, indent=2, default=str))
        z.writestr("daemon.log", _tail(paths.daemon_log()))
        z.writestr("cli-errors.log", _tail(paths.logs_dir() / "cli-errors.log"))
        for r in (state.get("requests") or [])[: max(0, args.requests)]:
            rid = str(r.get("id", ""))
            if rid.isalnum():
                z.writestr(f"requests/{rid}.log", _tail(paths.request_log(rid)))
    sys.stdout.write(f"Debug dump written to {out} (secrets redacted); attach it to the report.\n")
    return 0
