"""The TUI's view of the daemon API: :class:`skyd.sdk.aio.AsyncClient` plus the few reads
the TUI needs that the SDK has no named call for (raw log bytes, optional endpoints)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

from skyd.errors import SkydError
from skyd.sdk.aio import AsyncClient


class Unavailable(Exception):
    """The daemon has no such endpoint (a feature that has not landed / is disabled)."""


def _is_missing_route(e: SkydError) -> bool:
    # aiohttp's 404 for an unknown route travels as {"type": "HTTPError", "message": "Not Found"};
    # a NotFoundError of a real endpoint (unknown cluster) names the thing it did not find.
    return str(e).strip().lower() == "not found"


class TuiClient(AsyncClient):
    #: every user's objects (a daemon shared by several users: `skyd tui -u`, key `u`);
    #: by default the listings and the live stream have the caller's own only.
    all_users: bool = False

    async def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        if self.all_users:
            params = {**(params or {}), "all_users": 1}
        return await super().get(path, params)

    async def stream_bytes(self, path: str, params: dict[str, Any] | None = None) -> AsyncIterator[bytes]:
        """Raw chunks of a streamed response (job logs)."""
        resp = await self._send("GET", path, None, params, None)
        async with resp:
            async for chunk in resp.content.iter_any():
                yield chunk

    async def optional_get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """GET that raises :class:`Unavailable` when the route does not exist (404)."""
        try:
            return await self.get(path, params)
        except SkydError as e:
            if _is_missing_route(e):
                raise Unavailable(path) from None
            raise

    # -- reads ------------------------------------------------------------------------
    async def cluster_queue(self, cluster: str) -> list[dict[str, Any]]:
        doc = await self.optional_get(f"/v1/clusters/{quote(cluster, safe='')}/queue")
        return list(doc.get("jobs") or []) if isinstance(doc, dict) else list(doc or [])

    async def managed_jobs(self) -> list[dict[str, Any]]:
        doc = await self.optional_get("/v1/jobs")
        return list(doc.get("jobs") or []) if isinstance(doc, dict) else list(doc or [])

    async def services(self) -> list[dict[str, Any]]:
        doc = await self.optional_get("/v1/services")
        return list(doc.get("services") or []) if isinstance(doc, dict) else list(doc or [])

    def job_log(self, cluster: str, job_id: int | str, *, tail: int = 0,
                follow: bool = True) -> AsyncIterator[bytes]:
        return self.stream_bytes(
            f"/v1/clusters/{quote(cluster, safe='')}/jobs/{quote(str(job_id), safe='')}/logs",
            {"follow": 1 if follow else 0, "tail": tail},
        )

    def watch(self, topics: list[str] | None = None) -> AsyncIterator[dict[str, Any]]:
        params: dict[str, Any] = {"topics": topics} if topics else {}
        if self.all_users:
            params["all_users"] = 1
        return self.stream_ndjson("/v1/watch", params or None)
