"""``sky.serve``: services with SkyPilot 0.14's argument names (request ids + get)."""

from __future__ import annotations

from typing import Any


def up(task: Any, service_name: str, **kw: Any) -> str:
    if kw:
        raise TypeError(f"serve.up() got an unexpected keyword argument {sorted(kw)[0]!r}")
    from skyd import sdk
    from skyd.sdk import payloads
    from skyd.sky.api import source_of

    body = {**source_of(task), "name": service_name, "env": {}, "config": payloads.config_sources()}
    return str(sdk.client().submit("serve.up", body))


def update(task: Any, service_name: str, mode: Any = "rolling") -> str:
    from skyd import sdk
    from skyd.sdk import payloads
    from skyd.sky.api import source_of

    m = str(getattr(mode, "value", mode) or "rolling").lower()
    body = {**source_of(task), "name": service_name, "mode": m, "env": {},
            "config": payloads.config_sources()}
    return str(sdk.client().submit("serve.update", body))


def status(service_names: str | list[str] | None = None) -> str:
    from skyd.sdk import serve as s
    from skyd.sky.api import answered_now

    if isinstance(service_names, str):
        service_names = [service_names]
    rows = s.status()
    if service_names:
        rows = [r for r in rows if r.get("name") in set(service_names)]
    return answered_now(rows)


def down(service_names: str | list[str] | None, all: bool = False, purge: bool = False) -> str:  # noqa: A002
    from skyd import sdk

    ns = [service_names] if isinstance(service_names, str) else list(service_names or [])
    return str(sdk.client().submit("serve.down", {"names": ns, "all": all}))
