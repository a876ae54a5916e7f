"""Daemon side of ``skyd volumes`` (SkyPilot's ``sky volumes``): ``volumes.apply`` and
``volumes.delete`` verbs and ``GET /v1/volumes``, over the kubernetes provider's clients
(skyd.clouds.kubernetes.volumes)."""

from __future__ import annotations

from typing import Any

import anyio

from skyd.daemon.registry import register_read, register_verb
from skyd.errors import InvalidSpecError, NotFoundError


def _prov() -> Any:
    from skyd.clouds.base import get_cloud

    return get_cloud("kubernetes").provisioner()


async def _contexts() -> list[str]:
    from skyd.clouds.kubernetes import config

    ctxs, _ = await anyio.to_thread.run_sync(config.load_contexts)
    return [c.name for c in ctxs]


async def _all_rows() -> list[dict[str, Any]]:
    from skyd.clouds.kubernetes import volumes

    rows: list[dict[str, Any]] = []
    for ctx in await _contexts():
        try:
            rows.extend(await volumes.ls(_prov().api(ctx)))
        except Exception as e:  # noqa: BLE001 - one unreachable context does not hide the rest
            rows.append({"name": None, "infra": f"k8s/{ctx}", "error": str(e)})
    return rows


async def check_apply(payload: dict[str, Any]) -> None:
    from skyd.clouds.kubernetes import volumes

    volumes.parse(payload.get("volume"))


async def _apply(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    from skyd.clouds.kubernetes import volumes
    from skyd.clouds.kubernetes.pods import owner_id

    spec = volumes.parse(payload.get("volume"))
    context = volumes.context_of(spec.infra, await _contexts())
    row = await volumes.apply(_prov().api(context), spec, owner_id())
    ctx.log(f"Volume {spec.name}: {row['status']} in {row['infra']}/{row['namespace']}")
    return row


async def _ls(ctx: Any, request: Any) -> Any:
    return await _all_rows()


async def check_delete(payload: dict[str, Any]) -> None:
    names = payload.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidSpecError("names must be a list of volume names", field="names")
    if not names and not payload.get("all"):
        raise InvalidSpecError("no volume given", field="names", hint="name volumes, or -a for all")


async def _delete(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    from skyd.clouds.kubernetes import volumes

    rows = [r for r in await _all_rows() if r.get("name")]
    names = [r["name"] for r in rows] if payload.get("all") else list(payload.get("names") or [])
    missing = [n for n in names if n not in {r["name"] for r in rows}]
    if missing:
        raise NotFoundError(f"no volume {', '.join(missing)}", hint="skyd volumes ls")
    for r in rows:
        if r["name"] in names:
            await volumes.delete(_prov().api(r["infra"].split("/", 1)[1]), r)
            ctx.log(f"Volume {r['name']} deleted ({r['infra']}/{r['namespace']})")
    return {"deleted": names}


register_verb("volumes.apply", _apply, check=check_apply, summary="Create a volume (a Kubernetes PVC)")
register_verb("volumes.delete", _delete, check=check_delete, summary="Delete volumes skyd created")
register_read("GET", "/v1/volumes", _ls, summary="Volumes (Kubernetes PVCs skyd manages)")
