"""A small fake of the GCS JSON API (aiohttp, 127.0.0.1 only) with its own OAuth token
endpoint, on a thread with its own loop (it outlives daemons the tests kill).

Served, on GCS's wire format: ``POST /token`` (the service account's signed JWT, as
gcloud-aio-auth sends it; ``service_account_file()`` writes a key whose ``token_uri`` points
here), ``/storage/v1/b`` buckets insert/get/delete (409 for a taken name, 409 for a bucket
not empty), ``/storage/v1/b/<b>/o`` objects list (``prefix``, ``maxResults``,
``pageToken``/``nextPageToken``), get (metadata, or the bytes with ``alt=media``), delete;
``/upload/storage/v1/b/<b>/o`` simple (``uploadType=media``), multipart
(``uploadType=multipart``: multipart/related, JSON metadata then the bytes; what rclone
sends) and resumable (``uploadType=resumable``: a session ``Location``, then ``PUT``
pieces with ``Content-Range``, 308 until the last) uploads. Listing honours
``delimiter`` (``prefixes``); object metadata carries ``updated`` and ``mediaLink``. Every call needs a token issued here (401
otherwise). Objects live in memory.

    gcs = FakeGCS().start(); os.environ["SKYD_GCS_URL"] = gcs.url
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

EMAIL = "skyd-test@fake-project.iam.gserviceaccount.com"
PROJECT = "fake-project"


class FakeGCS:
    def __init__(self) -> None:
        self.port = 0
        self.buckets: dict[str, dict[str, bytes]] = {}
        self.updated: dict[tuple[str, str], str] = {}
        self.tokens: set[str] = set()
        self.uploads: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.page_size = 1000  # a test lowers it to exercise pageToken
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._private_key = ""
        self._public_key: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    def service_account_file(self, path: Path) -> Path:
        data = {"type": "service_account", "project_id": PROJECT, "private_key_id": "k1",
                "private_key": self._private_key, "client_email": EMAIL, "client_id": "1",
                "token_uri": self.token_url}
        path.write_text(json.dumps(data))
        path.chmod(0o600)
        return path

    def start(self) -> FakeGCS:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._private_key = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()).decode()
        self._public_key = key.public_key()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="fake-gcs",
                                        daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "fake GCS did not start"
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        r = app.router
        r.add_post("/token", self._token)
        r.add_post("/storage/v1/b", self._bucket_insert)
        r.add_get("/storage/v1/b/{b}", self._bucket_get)
        r.add_delete("/storage/v1/b/{b}", self._bucket_delete)
        r.add_get("/storage/v1/b/{b}/o", self._list)
        r.add_get("/storage/v1/b/{b}/o/{o:.+}", self._object_get)
        r.add_get("/download/storage/v1/b/{b}/o/{o:.+}", self._object_get)
        r.add_delete("/storage/v1/b/{b}/o/{o:.+}", self._object_delete)
        r.add_post("/upload/storage/v1/b/{b}/o", self._upload)
        r.add_put("/upload/resumable/{sid}", self._resumable_put)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _err(status: int, message: str) -> web.Response:
        return web.json_response({"error": {"code": status, "message": message,
                                            "errors": [{"message": message, "reason": "x"}]}},
                                 status=status)

    def _authed(self, request: web.Request) -> bool:
        self.calls.append((request.method, request.path))
        h = request.headers.get("Authorization", "")
        return h.startswith("Bearer ") and h[7:] in self.tokens

    def _meta(self, bucket: str, name: str) -> dict[str, Any]:
        from urllib.parse import quote

        when = self.updated.get((bucket, name), "2026-01-01T00:00:00.000Z")
        return {"kind": "storage#object", "bucket": bucket, "name": name,
                "size": str(len(self.buckets[bucket][name])), "updated": when,
                "timeCreated": when, "contentType": "application/octet-stream",
                "mediaLink": f"{self.url}/download/storage/v1/b/{bucket}/o/"
                             f"{quote(name, safe='')}?alt=media"}

    def _put(self, bucket: str, name: str, data: bytes) -> None:
        import datetime

        self.buckets[bucket][name] = data
        self.updated[(bucket, name)] = datetime.datetime.now(datetime.UTC).strftime(
            "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    # -- endpoints ----------------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        import jwt

        form = await request.post()
        try:
            claims = jwt.decode(str(form.get("assertion")), self._public_key, algorithms=["RS256"],
                                audience=self.token_url)
        except jwt.PyJWTError as e:
            return web.json_response({"error": "invalid_grant", "error_description": str(e)},
                                     status=400)
        if claims.get("iss") != EMAIL:
            return web.json_response({"error": "invalid_grant"}, status=400)
        tok = "ya29.fake-gcs-" + secrets.token_hex(8)
        self.tokens.add(tok)
        return web.json_response({"access_token": tok, "expires_in": 3600, "token_type": "Bearer"})

    async def _bucket_insert(self, request: web.Request) -> web.Response:
        if not self._authed(request):
            return self._err(401, "Invalid Credentials")
        if not request.query.get("project"):
            return self._err(400, "Required parameter: project")
        name = str((await request.json()).get("name") or "")
        if name in self.buckets:
            return self._err(409, "Your previous request to create the named bucket succeeded"
                                  " and you already own it.")
        self.buckets[name] = {}
        return web.json_response({"kind": "storage#bucket", "name": name, "id": name})

    async def _bucket_get(self, request: web.Request) -> web.Response:
        if not self._authed(request):
            return self._err(401, "Invalid Credentials")
        b = request.match_info["b"]
        if b not in self.buckets:
            return self._err(404, "The specified bucket does not exist.")
        return web.json_response({"kind": "storage#bucket", "name": b, "id": b})

    async def _bucket_delete(self, request: web.Request) -> web.Response:
        if not self._authed(request):
            return self._err(401, "Invalid Credentials")
        b = request.match_info["b"]
        if b not in self.buckets:
            return self._err(404, "The specified bucket does not exist.")
        if self.buckets[b]:
            return self._err(409, "The bucket you tried to delete is not empty.")
        del self.buckets[b]
        return web.Response(status=204)

    async def _list(self, request: web.Request) -> web.Response:
        if not self._authed(request):
            return self._err(401, "Invalid Credentials")
        b = request.match_info["b"]
        if b not in self.buckets:
            return self._err(404, "The specified bucket does not exist.")
        prefix = request.query.get("prefix", "")
        size = min(int(request.query.get("maxResults", "1000")), self.page_size)
        delim = request.query.get("delimiter", "")
        entries: set[str] = set()
        for n in self.buckets[b]:
            if not n.startswith(prefix):
                continue
            cut = n.find(delim, len(prefix)) if delim else -1
            entries.add(n[:cut + len(delim)] if cut >= 0 else n)
        names = sorted(entries)
        start = int(request.query.get("pageToken") or 0)
        page = names[start:start + size]
        out: dict[str, Any] = {"kind": "storage#objects",
                               "items": [self._meta(b, n) for n in page if n in self.buckets[b]]}
        dirs = [n for n in page if n not in self.buckets[b]]
        if dirs:
            out["prefixes"] = dirs
        if start + size < len(names):
            out["nextPageToken"] = str(start + size)
        return web.json_response(out)

    async def _object_get(self, request: web.Request) -> web.StreamResponse:
        if not self._authed(request):
            return self._err(401, "Invalid Credentials")
        b, o = request.match_info["b"], request.match_info["o"]
        if b not in self.buckets or o not in self.buckets[b]:
            return self._err(404, "No such object: " + f"{b}/{o}")
        if request.query.get("alt") != "media":
            return web.json_response(self._meta(b, o))
        return web.Response(body=self.buckets[b][o], content_type="application/octet-stream")

    async def _object_delete(self, request: web.Request) -> web.Response:
        if not self._authed(request):
            return self._err(401, "Invalid Credentials")
        b, o = request.match_info["b"], request.match_info["o"]
        if b not in self.buckets or o not in self.buckets[b]:
            return self._err(404, "No such object")
        del self.buckets[b][o]
        return web.Response(status=204)

    async def _upload(self, request: web.Request) -> web.Response:
        if not self._authed(request):
            return self._err(401, "Invalid Credentials")
        b = request.match_info["b"]
        if b not in self.buckets:
            return self._err(404, "The specified bucket does not exist.")
        kind, name = request.query.get("uploadType"), request.query.get("name", "")
        if kind == "multipart":
            reader = await request.multipart()
            meta = json.loads(await (await reader.next()).read())  # type: ignore[union-attr]
            data = bytes(await (await reader.next()).read())  # type: ignore[union-attr]
            name = str(meta.get("name") or name)
            if not name:
                return self._err(400, "Required: name")
            self._put(b, name, data)
            return web.json_response(self._meta(b, name))
        if not name:
            return self._err(400, "Required parameter: name")
        if kind == "media":
            self._put(b, name, await request.read())
            return web.json_response(self._meta(b, name))
        if kind == "resumable":
            sid = secrets.token_hex(8)
            self.uploads[sid] = {"bucket": b, "name": name, "data": bytearray()}
            return web.json_response({}, headers={
                "Location": f"{self.url}/upload/resumable/{sid}"})
        return self._err(400, f"uploadType {kind!r} is not supported here")

    async def _resumable_put(self, request: web.Request) -> web.Response:
        if not self._authed(request):
            return self._err(401, "Invalid Credentials")
        up = self.uploads.get(request.match_info["sid"])
        if up is None:
            return self._err(404, "No such upload session")
        rng = request.headers.get("Content-Range", "")  # bytes a-b/total
        span, _, total = rng.removeprefix("bytes ").partition("/")
        first = int(span.split("-")[0])
        if first != len(up["data"]):
            return self._err(400, f"piece starts at {first}, {len(up['data'])} received")
        up["data"] += await request.read()
        if len(up["data"]) < int(total):
            return web.Response(status=308, headers={"Range": f"bytes=0-{len(up['data']) - 1}"})
        self._put(up["bucket"], up["name"], bytes(up["data"]))
        del self.uploads[request.match_info["sid"]]
        return web.json_response(self._meta(up["bucket"], up["name"]))
