"""The Store protocol for Google Cloud Storage: the GCS JSON API over aiohttp.

The token is the one skyd's GCP driver uses (gcloud-aio-auth ``Token`` over the
credentials ``skyd.clouds.gcp.config.find_credentials`` finds: a service-account key or
application-default user credentials); the project for bucket creation is the driver's too.
``SKYD_GCS_URL`` points the store elsewhere (a fake in tests). Objects stream both ways in
CHUNK pieces: uploads above CHUNK use a resumable upload session, downloads ``alt=media``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import anyio

from skyd import settings as knobs
from skyd.errors import CredentialsError, InvalidSpecError, NotFoundError, SkydError

GCS_URL = "https://storage.googleapis.com"
CHUNK = 8 * 1024 * 1024  # resumable upload piece (a multiple of 256 KiB)
WRITE = 1024 * 1024


def base_url() -> str:
    return (knobs.GCS_URL.get() or GCS_URL).rstrip("/")


class GCSError(SkydError):
    """A refusal from the GCS API."""


def _o(key: str) -> str:
    return quote(key, safe="")


class GCSStore:
    name = "GCS"

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._tokens: Any = None
        self._creds: Any = None

    def _creds_or_raise(self) -> Any:
        from skyd.clouds.gcp.config import LOGIN_HINT, find_credentials

        if self._creds is None:
            self._creds = find_credentials()
            if self._creds is None:
                raise CredentialsError("no GCP credentials found for GCS storage", hint=LOGIN_HINT)
        return self._creds

    async def _req(self, method: str, path: str, *, ok: tuple[int, ...] = (200,),
                   **kw: Any) -> aiohttp.ClientResponse:
        """The response (the caller reads and releases it); GCSError for other statuses."""
        from skyd.clouds.gcp.api import TokenSource

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=20, sock_read=120))
            self._tokens = TokenSource(self._creds_or_raise(), self._session)
        for attempt in (1, 2):
            headers = {**kw.pop("headers", {}), "Authorization": f"Bearer {await self._tokens.get()}"}
            r = await self._session.request(method, base_url() + path, headers=headers, **kw)
            if r.status == 401 and attempt == 1:
                r.release()
                self._tokens.invalidate()
                continue
            if r.status in ok:
                return r
            text = (await r.text())[:300]
            r.release()
            if r.status in (401, 403):
                raise CredentialsError(f"GCS refused the request ({r.status}): {text}",
                                       hint="check the GCP credentials and their storage roles")
            raise GCSError(f"GCS {method} {path.split('?')[0]} -> {r.status}: {text}")
        raise AssertionError("unreachable")

    async def check_credentials(self) -> None:
        from skyd.clouds.gcp.api import TokenSource

        self._creds_or_raise()
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
            self._tokens = TokenSource(self._creds, self._session)
        await self._tokens.get()

    async def bucket_exists(self, bucket: str) -> bool:
        r = await self._req("GET", f"/storage/v1/b/{_o(bucket)}", ok=(200, 404))
        r.release()
        return r.status == 200

    async def create_bucket(self, bucket: str) -> None:
        from skyd.clouds.gcp.config import project_id, settings

        project = project_id(self._creds_or_raise(), settings())
        if not project:
            raise CredentialsError("no GCP project for the new bucket",
                                   hint="set GOOGLE_CLOUD_PROJECT or gcp.project_id in config.yaml")
        r = await self._req("POST", "/storage/v1/b", ok=(200, 409), params={"project": project},
                            json={"name": bucket})
        r.release()
        if r.status == 409:
            raise InvalidSpecError(f"bucket {bucket!r} already exists", field="file_mounts.name",
                                   hint="choose another name, or use it as a source")

    async def delete_bucket(self, bucket: str) -> None:
        """Delete every object, then the bucket (a bucket already gone is not an error)."""
        if not await self.bucket_exists(bucket):
            return
        keys = [k async for k, _ in self.list_objects(bucket, "")]
        limit = anyio.CapacityLimiter(16)

        async def one(key: str) -> None:
            async with limit:
                r = await self._req("DELETE", f"/storage/v1/b/{_o(bucket)}/o/{_o(key)}",
                                    ok=(200, 204, 404))
                r.release()

        async with anyio.create_task_group() as tg:
            for k in keys:
                tg.start_soon(one, k)
        r = await self._req("DELETE", f"/storage/v1/b/{_o(bucket)}", ok=(200, 204, 404))
        r.release()

    async def list_objects(self, bucket: str, prefix: str) -> AsyncIterator[tuple[str, int]]:
        token: str | None = None
        while True:
            params = {"prefix": prefix, "maxResults": "1000"}
            if token:
                params["pageToken"] = token
            r = await self._req("GET", f"/storage/v1/b/{_o(bucket)}/o", params=params)
            page = await r.json(content_type=None)
            r.release()
            for o in page.get("items") or ():
                yield str(o["name"]), int(o.get("size") or 0)
            token = page.get("nextPageToken")
            if not token:
                return

    async def download(self, bucket: str, key: str, dest: Path) -> int:
        r = await self._req("GET", f"/storage/v1/b/{_o(bucket)}/o/{_o(key)}", ok=(200, 404),
                            params={"alt": "media"})
        if r.status == 404:
            r.release()
            raise NotFoundError(f"gs://{bucket}/{key} does not exist")
        await anyio.to_thread.run_sync(lambda: dest.parent.mkdir(parents=True, exist_ok=True))
        n = 0
        buf = bytearray()
        try:
            async with await anyio.open_file(dest, "wb") as f:
                async for chunk in r.content.iter_chunked(WRITE):
                    buf += chunk
                    n += len(chunk)
                    if len(buf) >= WRITE:
                        await f.write(bytes(buf))
                        buf.clear()
                if buf:
                    await f.write(bytes(buf))
        finally:
            r.release()
        return n

    async def upload(self, src: Path, bucket: str, key: str) -> int:
        size = (await anyio.Path(src).stat()).st_size
        path = f"/upload/storage/v1/b/{_o(bucket)}/o"
        async with await anyio.open_file(src, "rb") as f:
            if size <= CHUNK:
                r = await self._req("POST", path, params={"uploadType": "media", "name": key},
                                    data=await f.read(),
                                    headers={"Content-Type": "application/octet-stream"})
                r.release()
                return size
            r = await self._req("POST", path, params={"uploadType": "resumable", "name": key},
                                json={"name": key})
            session_url = r.headers.get("Location", "")
            r.release()
            if not session_url.startswith(base_url() + "/"):
                raise GCSError(f"GCS answered a resumable upload with {session_url!r}")
            rel = session_url[len(base_url()):]
            off = 0
            while off < size:
                data = await f.read(CHUNK)
                end = off + len(data) - 1
                r = await self._req("PUT", rel, ok=(200, 201, 308), data=data,
                                    headers={"Content-Range": f"bytes {off}-{end}/{size}"})
                r.release()
                off += len(data)
        return size

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def rclone_remote() -> dict[str, str]:
    """The rclone ``google cloud storage`` remote for MOUNT modes: the service-account key
    the daemon found (it goes only into the node's 0600 rclone.conf), the driver's
    project, and the endpoint where SKYD_GCS_URL is set."""
    import json

    from skyd.clouds.gcp.config import LOGIN_HINT, find_credentials, project_id, settings

    creds = await anyio.to_thread.run_sync(find_credentials)
    if creds is None:
        raise CredentialsError("no GCP credentials found for the GCS mount", hint=LOGIN_HINT)
    if creds.kind != "service_account":
        raise CredentialsError(
            f"mounting a GCS bucket needs a service-account key; {creds.path} holds"
            f" {creds.kind} credentials",
            hint="point GOOGLE_APPLICATION_CREDENTIALS at a service-account key, or use mode: COPY")
    data = dict(creds.data)
    from skyd.clouds.gcp.config import token_url

    if token_url():
        data["token_uri"] = token_url()
    opts = {"type": "google cloud storage", "service_account_credentials": json.dumps(data),
            "bucket_policy_only": "true", "env_auth": "false"}
    project = project_id(creds, settings())
    if project:
        opts["project_number"] = project
    if knobs.GCS_URL.is_set():
        opts["endpoint"] = base_url() + "/storage/v1/"
    return opts

