"""A fake DigitalOcean API v2 (aiohttp, 127.0.0.1 only), also standing in for AMD Developer
Cloud (the same API at another base URL: start a second instance with other sizes).

Served (under ``/v2``): ``GET /account``; ``GET /account/keys/{fingerprint}``, ``POST
/account/keys``; ``GET /droplets?tag_name=`` (paged), ``POST /droplets``, ``GET/DELETE
/droplets/{id}``; ``GET /sizes``. Bearer tokens are checked (401 ``unauthorized``).
Errors are DO's JSON shape ``{"id": ..., "message": ...}``.

Droplets are fake SSH hosts (the registered key whose fingerprint the create names is
authorised) on 127.0.0.x; their public and private v4 addresses are that address. A new
droplet is ``new`` until its host is up (plus ``boot_s``), then ``active``.

Strict as DO documents it: a create body with a field DO does not list, no name/size/image,
a name that is not a hostname or a tag of other characters is refused with 422 (the
``refused`` list keeps the reasons). A droplet has the GPUs of its size, shown to
``nvidia-smi`` / ``amd-smi`` only when its image carries the driver stack (``gpu-amd-base``:
ROCm; ``gpu-h100x1-base`` / ``gpu-h100x8-base``: NVIDIA driver + CUDA); a plain Ubuntu
image shows none.

Knobs: ``dry`` (accept creates without making droplets: catalog walks),
``no_capacity(region or "*")`` (create answers 422 as DO does when a size is out of
stock), ``droplet_limit`` (422 "will exceed your droplet limit"), ``token`` (the only valid
one), ``rate_limit``/``boot_s`` (tests/fakes/vmapi.py).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import re
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.gpuprofile import profile
from tests.fakes.vmapi import FakeVMAPI

#: the create body's fields, as DO's "Create a New Droplet" reference lists them
CREATE_FIELDS = frozenset({"name", "region", "size", "image", "ssh_keys", "backups", "backup_policy",
                           "ipv6", "monitoring", "tags", "user_data", "private_networking", "volumes",
                           "vpc_uuid", "with_droplet_agent"})
HOSTNAME = re.compile(r"^[a-zA-Z0-9.-]{1,255}$")  # "a-z, A-Z, 0-9, . and -"
TAG = re.compile(r"^[a-zA-Z0-9_\-:]{1,255}$")  # "letters, numbers, colons, dashes, and underscores"
#: GPU model of a size -> the card its droplets have (what nvidia-smi / amd-smi print)
MODEL_CARD = {"amd_mi300x": "MI300X", "amd_mi325x": "MI325X", "nvidia_h100": "H100-SXM"}
#: images with a GPU driver stack (DO's "AI/ML-ready" images): (ROCm, NVIDIA driver + CUDA)
IMAGE_STACK = {"gpu-amd-base": (True, False), "gpu-h100x1-base": (False, True),
               "gpu-h100x8-base": (False, True)}

DO_SIZES = [
    ("gpu-mi300x1-192gb", "amd_mi300x", 1, 20, 245760, 1.99),
    ("gpu-mi300x8-1536gb", "amd_mi300x", 8, 160, 1966080, 15.92),
    ("gpu-mi325x1-256gb", "amd_mi325x", 1, 20, 245760, 0.0),
    ("gpu-mi325x8-2048gb", "amd_mi325x", 8, 160, 1966080, 0.0),
    ("gpu-h100x1-80gb", "nvidia_h100", 1, 20, 245760, 3.39),
    ("gpu-h100x8-640gb", "nvidia_h100", 8, 160, 1966080, 23.92),
    ("s-2vcpu-4gb", "", 0, 2, 4096, 0.03571),
]
AMD_SIZES = [
    ("gpu-mi300x1-192gb-devcloud", "amd_mi300x", 1, 20, 245760, 1.99),
    ("gpu-mi300x8-1536gb-devcloud", "amd_mi300x", 8, 160, 1966080, 15.92),
]


def fingerprint(public_key: str) -> str:
    h = hashlib.md5(base64.b64decode(public_key.split()[1])).hexdigest()
    return ":".join(h[i:i + 2] for i in range(0, len(h), 2))


class FakeDO(FakeVMAPI):
    def __init__(self, root: Path, *, first_ip: int, token: str = "dop_v1_fake", ssh_port: int = 0,
                 regions: tuple[str, ...] = ("nyc1", "atl1"), sizes: list[Any] | None = None) -> None:
        super().__init__(root, first_ip=first_ip, ssh_port=ssh_port)
        self.token = token
        self.regions = regions
        self.sizes = sizes if sizes is not None else DO_SIZES
        self.keys: dict[str, dict[str, Any]] = {}
        self.droplets: dict[str, dict[str, Any]] = {}
        self.creates: list[dict[str, Any]] = []
        self.full: set[str] = set()
        self.droplet_limit = False
        self.refused: list[str] = []  # the messages of every create refused as malformed
        self.dry = False  # accept creates (every check done) without making droplets
        self._ids = itertools.count(3000)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def no_capacity(self, region: str = "*") -> None:
        self.full.add(region)

    def clear(self) -> None:
        self.reset()
        self.full.clear()
        self.droplet_limit = False
        self.dry = False

    def live(self, tag: str | None = None) -> list[dict[str, Any]]:
        return [dict(d) for d in list(self.droplets.values())
                if tag is None or any(t.endswith(tag) for t in d["tags"])]

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/v2/{rest:.*}", self._serve)

    @staticmethod
    def _err(status: int, eid: str, message: str) -> web.Response:
        return web.json_response({"id": eid, "message": message, "request_id": "fake"}, status=status)

    async def _serve(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return self._err(401, "unauthorized", "Unable to authenticate you")
        parts = [p for p in request.match_info["rest"].split("/") if p]
        m = request.method
        if parts == ["account"] and m == "GET":
            return web.json_response({"account": {"email": "skyd@example.test", "status": "active",
                                                  "droplet_limit": 25}})
        if parts[:2] == ["account", "keys"]:
            if len(parts) == 3 and m == "GET":
                k = self.keys.get(parts[2])
                return web.json_response({"ssh_key": k}) if k else self._err(
                    404, "not_found", "The resource you were accessing could not be found.")
            if len(parts) == 2 and m == "POST":
                body = await request.json()
                fp = fingerprint(body["public_key"])
                if fp in self.keys:
                    return self._err(422, "unprocessable_entity", "SSH Key is already in use on your account")
                self.keys[fp] = {"id": len(self.keys) + 1, "fingerprint": fp, **body}
                return web.json_response({"ssh_key": self.keys[fp]}, status=201)
        if parts == ["sizes"] and m == "GET":
            return web.json_response({"sizes": [self._size(s) for s in self.sizes], "links": {},
                                      "meta": {"total": len(self.sizes)}})
        if parts[:1] == ["droplets"]:
            if len(parts) == 1 and m == "GET":
                return self._list(request)
            if len(parts) == 1 and m == "POST":
                return await self._create(request)
            d = self.droplets.get(parts[1]) if len(parts) == 2 else None
            if d is None:
                return self._err(404, "not_found", "The resource you were accessing could not be found.")
            if m == "GET":
                return web.json_response({"droplet": d})
            if m == "DELETE":
                self.droplets.pop(parts[1], None)
                await self.drop_host(parts[1])
                return web.Response(status=204)
        return self._err(404, "not_found", f"fake DO does not serve {m} {request.path}")

    def _size(self, s: Any) -> dict[str, Any]:
        slug, model, count, vcpus, mem, price = s
        out = {"slug": slug, "vcpus": vcpus, "memory": mem, "disk": 720, "price_hourly": price,
               "price_monthly": round(price * 730, 2), "regions": list(self.regions), "available": True}
        if model:  # only GPU sizes carry gpu_info
            out["gpu_info"] = {"count": count, "model": model, "vram": {"amount": 192 * count, "unit": "gib"}}
        return out

    @staticmethod
    def _invalid(body: Any) -> str | None:
        """What DO's create refuses (422) in a body: fields it does not have, a missing
        name/size/image, a name that is not a hostname, a tag of other characters."""
        if not isinstance(body, dict):
            return "request body must be a JSON object"
        unknown = sorted(set(body) - CREATE_FIELDS)
        if unknown:
            return f"unknown field(s): {', '.join(unknown)}"
        for k in ("name", "size", "image"):
            if not body.get(k):
                return f"{k} is required"
        if not HOSTNAME.match(str(body["name"])):
            return "Only valid hostname characters are allowed. (a-z, A-Z, 0-9, . and -)"
        for t in body.get("tags") or []:
            if not isinstance(t, str) or not TAG.match(t):
                return f"tag {t!r}: tags may contain letters, numbers, colons, dashes, and underscores"
        for k in ("backups", "ipv6", "monitoring", "with_droplet_agent"):
            if k in body and not isinstance(body[k], bool):
                return f"{k} must be a boolean"
        return None

    def _list(self, request: web.Request) -> web.Response:
        tag = request.query.get("tag_name")
        items = [d for d in self.droplets.values() if tag is None or tag in d["tags"]]
        per = int(request.query.get("per_page", "20"))
        page = int(request.query.get("page", "1"))
        chunk = items[(page - 1) * per: page * per]
        links: dict[str, Any] = {}
        if page * per < len(items):
            links = {"pages": {"next": f"{self.url}/v2/droplets?page={page + 1}&per_page={per}"}}
        return web.json_response({"droplets": chunk, "links": links, "meta": {"total": len(items)}})

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.creates.append(body)
        bad = self._invalid(body)
        if bad:
            self.refused.append(bad)
            return self._err(422, "unprocessable_entity", bad)
        region, size = body.get("region"), body.get("size")
        if region not in self.regions or size not in {s[0] for s in self.sizes}:
            return self._err(422, "unprocessable_entity", f"Size is not available in region {region}.")
        if self.droplet_limit:
            return self._err(422, "unprocessable_entity",
                             "creating this/these droplet(s) will exceed your droplet limit")
        if "*" in self.full or region in self.full:
            return self._err(422, "unprocessable_entity",
                             f"The size {size} is currently out of stock in {region}. Please try another region.")
        keys = [self.keys[k] for k in body.get("ssh_keys") or [] if k in self.keys]
        if not keys:
            return self._err(422, "unprocessable_entity", "ssh_keys: no such key")
        did = str(next(self._ids))
        d = {"id": int(did), "name": body["name"], "status": "new", "size_slug": size,
             "region": {"slug": region}, "image": {"slug": body.get("image")},
             "tags": list(body.get("tags") or []), "networks": {"v4": [], "v6": []}}
        self.droplets[did] = d
        if self.dry:
            self.droplets.pop(did)
            return web.json_response({"droplet": d, "links": {"actions": []}}, status=202)
        asyncio.get_running_loop().create_task(self._boot(did, keys[0]["public_key"]))
        return web.json_response({"droplet": d, "links": {"actions": []}}, status=202)

    async def _boot(self, did: str, public_key: str) -> None:
        await asyncio.sleep(self.boot_s)
        await self.wait_pause("before_running")
        if did not in self.droplets:
            return
        d = self.droplets[did]
        _, model, count, *_ = next(s for s in self.sizes if s[0] == d["size_slug"])
        rocm, cuda = IMAGE_STACK.get(str(d["image"]["slug"]), (False, False))
        h = await self.new_host(did, public_key, profile(self.root / f"gpus-{did}", MODEL_CARD.get(model),  # type: ignore[arg-type]
                                                         count, rocm=rocm, cuda=cuda))
        d = self.droplets.get(did)
        if d is None:  # deleted meanwhile
            await self.drop_host(did)
            return
        d["networks"]["v4"] = [{"ip_address": h.host, "type": "public"},
                               {"ip_address": h.host, "type": "private"}]
        d["status"] = "active"
