"""The serving calls of the SDK (blocking), as `skyd serve` makes them::

    from skyd.sdk import serve
    out = serve.up("svc.yaml", name="llm")          # {"name", "endpoint"}
    serve.status("llm")                              # the service with its replicas
    serve.down(["llm"])
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from skyd.sdk import payloads


def _c() -> Any:
    from skyd.sdk import client

    return client()


def _result(rid: str) -> dict[str, Any]:
    from skyd.sdk import get_result

    return dict(get_result(rid) or {})


def up(task: str | os.PathLike[str] | None = None, *, yaml_text: str | None = None,
       name: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """`skyd serve up`: {"name", "endpoint"} once the service exists (replicas follow)."""
    body = {**payloads.task_source(task, yaml_text=yaml_text), "name": name, "env": env or {}}
    return _result(str(_c().submit("serve.up", body)))


def update(name: str, task: str | os.PathLike[str] | None = None, *,
           yaml_text: str | None = None, mode: str = "rolling",
           env: dict[str, str] | None = None) -> dict[str, Any]:
    """`skyd serve update`: {"name", "version"}; the replicas roll over afterwards."""
    body = {**payloads.task_source(task, yaml_text=yaml_text), "name": name, "mode": mode,
            "env": env or {}}
    return _result(str(_c().submit("serve.update", body)))


def status(name: str | None = None) -> Any:
    """One service (a dict) or every service (a list), each with its replicas."""
    return _c().get(f"/v1/services/{quote(name, safe='')}") if name else list(_c().get("/v1/services"))


def down(names: list[str] | str | None = None, *, all_services: bool = False) -> list[str]:
    """`skyd serve down`: returns once the replicas' clusters are gone."""
    ns = [names] if isinstance(names, str) else list(names or [])
    return list(_result(str(_c().submit("serve.down", {"names": ns, "all": all_services})))
                .get("down") or [])


def logs(name: str, replica: int | None = None, *, follow: bool = False,
         load_balancer: bool = False) -> Iterator[str]:
    """A replica's output (or the controller's log without ``replica``; the load balancer's
    access log with ``load_balancer``)."""
    params: dict[str, Any] = {"follow": 1 if follow else 0}
    if load_balancer:
        params["load_balancer"] = 1
    elif replica is not None:
        params["replica"] = replica
    for item in _c().stream_ndjson(f"/v1/services/{quote(name, safe='')}/logs", params):
        yield str(item.get("text", ""))
