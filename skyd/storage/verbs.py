"""Daemon side of ``skyd storage``: ``GET /v1/storage`` (the buckets skyd created) and the
``storage.delete`` verb (only ever a bucket in that record)."""

from __future__ import annotations

from typing import Any

import pydantic

from skyd.daemon.registry import register_read, register_verb
from skyd.errors import InvalidSpecError
from skyd.storage import db as sdb
from skyd.storage import schema as _schema  # noqa: F401 - registers the table
from skyd.storage.mounts import delete_created


class DeleteBody(pydantic.BaseModel):
    names: list[str] = []
    all: bool = False


async def _ls(ctx: Any, request: Any) -> Any:
    return await sdb.list_all(ctx.store)


async def _delete(ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
    names = list(payload.get("names") or [])
    if payload.get("all"):
        names = [r["name"] for r in await sdb.list_all(ctx.store)]
    elif not names:
        raise InvalidSpecError("no bucket given", hint="name buckets, or -a for all skyd created")
    for n in names:
        await delete_created(ctx.store, n, ctx.log)
    return {"deleted": names}


register_read("GET", "/v1/storage", _ls, summary="Buckets skyd created")
register_verb("storage.delete", _delete, body=DeleteBody,
              summary="Delete buckets skyd created (never any other)")
