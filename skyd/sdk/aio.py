"""Async SDK (aiohttp over the Unix socket): the sync SDK's calls as coroutines.

    async with AsyncClient() as c:
        rid = await c.submit("sleep", {"seconds": 1})
        async for ev in c.stream(rid): ...        # ends after the terminal event
        result = await c.wait(rid)

Module-level coroutines (``await aio.status()``) use a short-lived client each.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import anyio

from skyd import paths, settings
from skyd.errors import DaemonUnavailableError, SkydError, error_from_dict
from skyd.sdk import payloads
from skyd.sdk.transport import (
    REATTACH_TIMEOUT,
    REQUEST_ID_HEADER,
    DaemonBusy,
    RequestIdTaken,
    ensure_daemon,
    raise_for,
    request_url,
    socket_answers,
)


class AsyncClient:
    def __init__(self, socket_path: str | Path | None = None, *, autostart: bool | None = None,
                 timeout: float = 300.0) -> None:
        from skyd.sdk.remote import LocalRelay, resolve_target

        self.socket_path = str(socket_path or paths.socket_path())
        # SKYD_HOST / the current context: a private local socket relayed to that host.
        target = None if socket_path is not None else resolve_target()
        self._relay = LocalRelay(target) if target is not None else None
        if self._relay is not None:
            self.socket_path = self._relay.path
        if autostart is None:
            autostart = not settings.NO_AUTOSTART.get()
        self.autostart = autostart and target is None
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self.last_result: Any = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._relay is not None:
            self._relay.close()
            self._relay = None

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=self.socket_path),
                timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
            )
        return self._session

    async def _send(self, method: str, path: str, body: Any, params: dict[str, Any] | None,
                    timeout: float | None, *, headers: dict[str, str] | None = None,
                    idempotent: bool = False) -> aiohttp.ClientResponse:
        """Send one request; its response (raises the daemon's error). ``idempotent``: the
        request may be sent again whatever happened to the first try (a submit under a
        client-chosen id): while the daemon is gone it is restarted (when allowed) and the
        request resent, for up to REATTACH_TIMEOUT seconds."""
        url = "http://skyd" + request_url(path, params)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        started = False
        deadline = time.monotonic() + REATTACH_TIMEOUT
        while True:
            try:
                resp = await self._sess().request(
                    method, url, data=data, headers=hdrs or None,
                    timeout=aiohttp.ClientTimeout(total=timeout),
                )
            except aiohttp.ClientConnectorError as e:  # nobody listens on the socket
                if idempotent and self.autostart and time.monotonic() < deadline:
                    await self._wait_for_daemon(deadline, e)
                    continue
                if not self.autostart or started:
                    raise self._unavailable(e) from None
                await anyio.to_thread.run_sync(ensure_daemon, self.socket_path)
                started = True
                continue
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                # The daemon died (or closed a keep-alive connection) under the request: a
                # submit under a client-chosen id is sent again once a daemon answers.
                await self._drop_session()
                if idempotent and time.monotonic() < deadline:
                    await self._wait_for_daemon(deadline, e)
                    continue
                raise self._unavailable(e) from None
            if resp.status >= 400:
                raw = await resp.read()
                resp.release()
                raise_for(resp.status, raw)
            return resp

    def _unavailable(self, e: BaseException) -> DaemonUnavailableError:
        return DaemonUnavailableError(f"cannot reach the skyd daemon at {self.socket_path}: {e}",
                                      hint="start it with: skyd daemon start")

    async def _drop_session(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _wait_for_daemon(self, deadline: float, cause: BaseException) -> None:
        """Until the daemon's socket answers again (starting it when allowed), or the
        deadline: then DaemonUnavailableError."""
        while time.monotonic() < deadline:
            if await anyio.to_thread.run_sync(socket_answers, self.socket_path, 0.5):
                return
            if self.autostart:
                try:
                    await anyio.to_thread.run_sync(
                        lambda: ensure_daemon(self.socket_path,
                                              timeout=max(1.0, deadline - time.monotonic())))
                    return
                except DaemonUnavailableError:
                    pass
            await anyio.sleep(0.1)
        raise self._unavailable(cause)

    async def request(self, method: str, path: str, body: Any = None,
                      params: dict[str, Any] | None = None) -> Any:
        resp = await self._send(method, path, body, params, self.timeout)
        async with resp:
            raw = await resp.read()
        return json.loads(raw) if raw else None

    async def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        return await self.request("POST", path, body if body is not None else {}, params)

    async def delete(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return await self.request("DELETE", path, params=params)

    async def stream_ndjson(self, path: str, params: dict[str, Any] | None = None,
                            method: str = "GET", body: Any = None) -> AsyncIterator[dict[str, Any]]:
        resp = await self._send(method, path, body, params, None)
        async with resp:
            async for line in resp.content:
                if line.strip():
                    yield json.loads(line)

    # -- verbs -----------------------------------------------------------------------
    async def submit(self, verb: str, payload: dict[str, Any] | None = None,
                     request_id: str | None = None) -> str:
        """Submit under a request id chosen here (``request_id``, else a random one), so
        the request can be sent again after the daemon died before answering (restarted
        when allowed) and still runs once: the daemon answers a repeat with the request it
        already has (the same contract as the blocking client's submit)."""
        if self._relay is not None and payload and ("yaml" in payload or "overrides" in payload):
            # A daemon on another host: the task's local files travel first (file I/O and
            # hashing: in a thread, through the blocking client's SSH channel).
            from skyd.sdk.transport import Client
            from skyd.sdk.uploads import upload

            def send(p: dict[str, Any]) -> dict[str, Any]:
                with Client() as c:
                    return upload(c, p)

            payload = await anyio.to_thread.run_sync(send, payload)
        url = f"/v1/requests/{quote(verb, safe='.')}"
        busy_until = time.monotonic() + REATTACH_TIMEOUT
        rid = request_id or secrets.token_hex(4)
        taken = 0
        while taken < 5:
            try:
                resp = await self._send("POST", url, payload or {}, None, self.timeout,
                                        headers={REQUEST_ID_HEADER: rid}, idempotent=True)
                async with resp:
                    doc = json.loads(await resp.read())
            except DaemonBusy:
                if time.monotonic() > busy_until:
                    raise
                await anyio.sleep(0.2)  # the same id: a retry can never run the work twice
                continue
            except RequestIdTaken:
                if request_id is not None:
                    raise SkydError(f"request id {rid} is already used by another request",
                                    hint="submit it with another id") from None
                rid = secrets.token_hex(4)  # another request has this id: pick a new one
                taken += 1
                continue
            return str(doc["request_id"])
        raise SkydError("could not pick a free request id", hint="retry")

    async def stream(self, request_id: str, follow: bool = True) -> AsyncIterator[dict[str, Any]]:
        """Events from the start; the last one yielded is the terminal ``result`` or
        ``error`` event (not raised here; use :meth:`wait` or ``result_of_event``)."""
        async for ev in self.stream_ndjson(f"/v1/requests/{quote(request_id, safe='')}/events",
                                           {"follow": 1 if follow else 0}):
            yield ev
            if ev.get("type") in ("result", "error"):
                return

    async def stream_and_get(self, request_id: str) -> AsyncIterator[dict[str, Any]]:
        """Like the sync SDK: yields non-terminal events; raises the request's error;
        the result is available afterwards as ``self.last_result``."""
        async for ev in self.stream(request_id):
            if ev.get("type") == "error":
                raise error_from_dict(ev.get("error") or {})
            if ev.get("type") == "result":
                self.last_result = ev.get("result")
                return
            yield ev

    async def wait(self, request_id: str) -> Any:
        async for _ in self.stream_and_get(request_id):
            pass
        return self.last_result

    async def validate(self, yaml_text: str, *, env: dict[str, str] | None = None,
                       base_dir: str | None = None, path: str | None = None) -> dict[str, Any]:
        return dict(await self.post("/v1/validate", {
            "yaml": yaml_text, "env": env or {}, "base_dir": base_dir or os.getcwd(), "path": path}))

    async def status(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        return list(await self.get("/v1/status", {"name": names} if names else None))

    async def requests_ls(self, status: list[str] | str | None = None, verb: str | None = None,
                          limit: int = 100) -> list[dict[str, Any]]:
        return list(await self.get("/v1/requests", {"status": status, "verb": verb, "limit": limit}))

    async def requests_get(self, request_id: str) -> dict[str, Any]:
        return dict(await self.get(f"/v1/requests/{quote(request_id, safe='')}"))

    async def requests_cancel(self, request_id: str) -> dict[str, Any]:
        return dict(await self.delete(f"/v1/requests/{quote(request_id, safe='')}"))

    async def health(self) -> dict[str, Any]:
        return dict(await self.get("/v1/health"))

    # -- the CLI's verbs (request bodies from skyd.sdk.payloads, as the sync SDK) ---------
    async def launch(self, task: str | os.PathLike[str] | None = None, *,
                     command: str | None = None, yaml_text: str | None = None,
                     cluster_name: str | None = None, **kw: Any) -> str:
        src = payloads.task_source(task, command=command, yaml_text=yaml_text)
        return await self.submit("launch", payloads.launch_payload(src, cluster_name=cluster_name, **kw))

    async def exec(self, cluster_name: str, task: str | os.PathLike[str] | None = None, *,
                   command: str | None = None, yaml_text: str | None = None, **kw: Any) -> str:
        src = payloads.task_source(task, command=command, yaml_text=yaml_text)
        return await self.submit("exec", payloads.exec_payload(src, cluster_name=cluster_name, **kw))

    async def stop(self, clusters: list[str] | str | None = None, *, all_clusters: bool = False) -> str:
        return await self.submit("stop", payloads.clusters_payload(clusters, all_clusters))

    async def start(self, clusters: list[str] | str | None = None, *, all_clusters: bool = False) -> str:
        return await self.submit("start", payloads.clusters_payload(clusters, all_clusters))

    async def down(self, clusters: list[str] | str | None = None, *, all_clusters: bool = False) -> str:
        return await self.submit("down", payloads.clusters_payload(clusters, all_clusters))

    async def queue(self, cluster_name: str) -> list[dict[str, Any]]:
        return list((await self.get(f"/v1/clusters/{quote(cluster_name, safe='')}/queue"))["jobs"])

    async def jobs_launch(self, task: str | os.PathLike[str] | None = None, *,
                          command: str | None = None, yaml_text: str | None = None,
                          name: str | None = None, env: dict[str, str] | None = None,
                          secrets: dict[str, str | None] | None = None,
                          job_recovery: str | None = None) -> str:
        body = payloads.jobs_launch_payload(
            payloads.task_source(task, command=command, yaml_text=yaml_text), name=name,
            env=env, secrets=secrets, job_recovery=job_recovery)
        return await self.submit("jobs.launch", body)


async def _one(name: str, *args: Any, **kw: Any) -> Any:
    async with AsyncClient() as c:
        return await getattr(c, name)(*args, **kw)


async def submit(verb: str, payload: dict[str, Any] | None = None,
                 request_id: str | None = None) -> str:
    return str(await _one("submit", verb, payload, request_id))


async def wait(request_id: str) -> Any:
    return await _one("wait", request_id)


async def validate(yaml_text: str, **kw: Any) -> dict[str, Any]:
    return dict(await _one("validate", yaml_text, **kw))


async def status(names: list[str] | None = None) -> list[dict[str, Any]]:
    return list(await _one("status", names))


async def requests_ls(**kw: Any) -> list[dict[str, Any]]:
    return list(await _one("requests_ls", **kw))


async def requests_get(request_id: str) -> dict[str, Any]:
    return dict(await _one("requests_get", request_id))


async def requests_cancel(request_id: str) -> dict[str, Any]:
    return dict(await _one("requests_cancel", request_id))


async def launch(task: str | os.PathLike[str] | None = None, **kw: Any) -> str:
    return str(await _one("launch", task, **kw))


async def exec(cluster_name: str, task: str | os.PathLike[str] | None = None,  # noqa: A001
               **kw: Any) -> str:
    return str(await _one("exec", cluster_name, task, **kw))


async def jobs_launch(task: str | os.PathLike[str] | None = None, **kw: Any) -> str:
    return str(await _one("jobs_launch", task, **kw))


async def down(clusters: list[str] | str | None = None, **kw: Any) -> str:
    return str(await _one("down", clusters, **kw))


async def queue(cluster_name: str) -> list[dict[str, Any]]:
    return list(await _one("queue", cluster_name))


async def stream_and_get(request_id: str) -> AsyncIterator[dict[str, Any]]:
    """Yields events (the terminal one included last); raises the request's error."""
    async with AsyncClient() as c:
        async for ev in c.stream(request_id):
            if ev.get("type") == "error":
                raise error_from_dict(ev.get("error") or {})
            yield ev
