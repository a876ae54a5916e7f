"""Readiness probing with SkyServe's semantics: GET the probe path (POST with
``post_data``), with the probe's headers, within ``timeout_seconds``; ready on 200."""

from __future__ import annotations

import json
from typing import Any

import aiohttp


class Prober:
    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    def _s(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True),
                cookie_jar=aiohttp.DummyCookieJar())
        return self._session

    async def probe(self, url: str, probe: dict[str, Any]) -> tuple[bool, str]:
        """(ready, why not)."""
        path = probe.get("path") or "/"
        timeout = aiohttp.ClientTimeout(total=float(probe.get("timeout_seconds") or 15))
        headers = dict(probe.get("headers") or {})
        data = probe.get("post_data")
        try:
            if data is not None:
                body = json.dumps(data) if isinstance(data, dict) else str(data)
                if isinstance(data, dict):
                    headers.setdefault("Content-Type", "application/json")
                cm = self._s().post(url + path, data=body, headers=headers, timeout=timeout)
            else:
                cm = self._s().get(url + path, headers=headers, timeout=timeout)
            async with cm as r:
                await r.read()
                if r.status == 200:
                    return True, ""
                return False, f"probe {path} answered {r.status}"
        except TimeoutError:
            return False, f"probe {path} timed out"
        except aiohttp.ClientError as e:
            return False, f"probe {path} failed: {type(e).__name__}"

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
