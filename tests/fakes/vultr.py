"""A fake Vultr API v2 (under ``/v2``, Bearer key) whose servers are fake SSH hosts.

Served: ``GET /account``, ``GET|POST /ssh-keys``, ``GET|POST /bare-metals`` and
``/instances``, ``GET|DELETE /<kind>/<id>``, ``POST /<kind>/<id>/halt|start``,
``GET /plans-metal``, ``GET /plans``. Shapes as Vultr's: ``{"bare_metal": {...}}`` on
create (status ``pending``, ``main_ip`` "0.0.0.0" until it is ``active``), lists with
``meta.links.next``, errors ``{"error": "...", "status": N}``: a wrong key is 401 "Invalid
API token.", no capacity a 400 saying the plan is not available in the region. Every server
shares one SSH port (``ssh_port``, what ``SKYD_VULTR_SSH_PORT`` says), each on its own
loopback address; its sshd accepts the key uploaded to /ssh-keys and named in ``sshkey_id``.

A server behaves like the image it was booted from: the GPUs of an AMD plan (``...-mi300x-gpu``)
show to ``amd-smi`` only when the image has ROCm, i.e. an ``image_id`` in ``rocm_images`` (a
user's ROCm snapshot), or an OS whose ``user_data`` (base64 cloud-init) installs the
``amdgpu-dkms`` driver and ``rocm``: then the server first boots without them, and after
``setup_s`` "reboots" with the GPUs visible and the marker its setup unit writes
(``~/.skyd-rocm-ready``). Plain Ubuntu (``os_id`` 1743) has no amd-smi and shows no GPU.
Cloud GPU VMs (``vcg-*``) come with the NVIDIA driver (``gpu`` profile as set).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any

from aiohttp import web

from tests.fakes.neobase import NeoFake
from tests.fakes.sshhost import FakeSSHHost

PLANS_METAL = [{"id": "vbm-256c-2048gb-8-mi300x-gpu", "cpu_count": 128, "cpu_threads": 256,
                "ram": 2097152, "disk": 3840, "monthly_cost": 12790.0, "hourly_cost": 17.52,
                "hourly_cost_preemptible": 14.72, "type": "EPYC", "locations": ["ord"]},
               {"id": "vbm-4c-32gb", "cpu_count": 4, "ram": 32768, "monthly_cost": 120.0,
                "locations": ["ewr"]}]
PLANS = [{"id": "vcg-a100-12c-120g-80vram", "vcpu_count": 12, "ram": 122880, "gpu_vram_gb": 80,
          "gpu_type": "NVIDIA_A100", "hourly_cost": 2.6, "monthly_cost": 1750.0, "locations": ["ewr"]}]


def installs_rocm(user_data: str | None) -> bool:
    """Whether a create's ``user_data`` installs the ROCm driver stack at first boot."""
    if not user_data:
        return False
    try:
        script = base64.b64decode(user_data, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    return "amdgpu-dkms" in script and "rocm" in script and "reboot" in script


class FakeVultr(NeoFake):
    provider = "vultr"
    setup_s = 0.3  # how long a ROCm first-boot install takes (then a reboot)
    rocm_images: set[str] = set()  # user image ids that carry ROCm (set per test)

    def image_gpu(self, srv: dict[str, Any]) -> str:
        """The GPU profile the server shows now: its plan's GPUs if its image has the driver."""
        if not str(srv["plan"]).endswith("-mi300x-gpu"):
            return self.gpu if str(srv["plan"]).startswith("vcg-") else "none"
        if srv.get("image_id") and srv["image_id"] in self.rocm_images:
            return "mi300x"
        return "mi300x" if srv.get("_rocm_ready") else "none"

    async def _new_host(self, mid: str, public_key: str) -> FakeSSHHost:
        return await self.add_host(mid, self.root / f"{self.provider}-{mid}", public_key,
                                   port=self.ssh_port if self.shared_ssh_port else 0,
                                   gpu=self.image_gpu(self.machines[mid]))

    async def _first_boot_setup(self, srv: dict[str, Any]) -> None:
        """The user data's install, then the reboot into the driver (GPUs and marker appear)."""
        await asyncio.sleep(self.setup_s)
        h = self.hosts.get(srv["id"])
        if h is None or srv["id"] not in self.machines:
            return
        await h.stop()
        srv["_rocm_ready"] = True
        h.gpu = self.image_gpu(srv)
        (h.home / ".skyd-rocm-ready").parent.mkdir(parents=True, exist_ok=True)
        (h.home / ".skyd-rocm-ready").write_text("")
        await h.start()

    @property
    def api_url(self) -> str:
        return f"{self.url}/v2"

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/v2/{rest:.*}", self._serve)

    @staticmethod
    def _err(status: int, msg: str) -> web.Response:
        return web.json_response({"error": msg, "status": status}, status=status)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization", "")[7:] not in self.keys:
            return self._err(401, "Invalid API token.")
        parts = [p for p in request.match_info["rest"].split("/") if p]
        m = request.method
        if parts == ["account"]:
            return web.json_response({"account": {"name": "skyd", "email": "skyd@example.test"}})
        if parts == ["plans-metal"]:
            return web.json_response({"plans_metal": PLANS_METAL, "meta": {"total": len(PLANS_METAL)}})
        if parts == ["plans"]:
            return web.json_response({"plans": PLANS, "meta": {"total": len(PLANS)}})
        if parts == ["ssh-keys"]:
            if m == "POST":
                b = await request.json()
                k = {"id": f"key-{self.next_id()}", "name": b["name"], "ssh_key": b["ssh_key"]}
                self.ssh_keys.append(k)
                return web.json_response({"ssh_key": k}, status=201)
            return web.json_response({"ssh_keys": self.ssh_keys, "meta": {"links": {"next": ""}}})
        if parts and parts[0] in ("bare-metals", "instances"):
            return await self._servers(request, parts[0], parts[1:])
        return self._err(404, f"no route {request.path}")

    async def _servers(self, request: web.Request, kind: str, rest: list[str]) -> web.StreamResponse:
        one, many = ("bare_metal", "bare_metals") if kind == "bare-metals" else ("instance", "instances")
        m = request.method
        if not rest and m == "GET":
            items = [s for s in self.live() if s["_kind"] == kind]
            return web.json_response({many: [self._view(s) for s in items], "meta": {"links": {"next": ""}}})
        if not rest and m == "POST":
            return await self._create(request, kind, one)
        srv = self.machines.get(rest[0])
        if srv is None or srv["_kind"] != kind:
            return self._err(404, "Server not found.")
        if len(rest) == 1 and m == "GET":
            return web.json_response({one: self._view(srv)})
        if len(rest) == 1 and m == "DELETE":
            await self.remove(srv["id"])
            return web.Response(status=204)
        if rest[1:] == ["halt"]:
            srv["power_status"] = "stopped"
            await self.halt(srv["id"])
            return web.Response(status=204)
        if rest[1:] == ["start"]:
            srv["status"], srv["power_status"] = "pending", "running"
            asyncio.get_running_loop().create_task(self._boot(srv))
            return web.Response(status=204)
        return self._err(404, f"no route {request.path}")

    @staticmethod
    def _view(s: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in s.items() if not k.startswith("_")}

    async def _create(self, request: web.Request, kind: str, one: str) -> web.Response:
        await self.wait_pause("before_create")
        await asyncio.sleep(self.slow_s)
        b = await request.json()
        self.creates.append(dict(b) | {"_kind": kind})
        for k in ("region", "plan", "label"):
            if not b.get(k):
                return self._err(400, f"Invalid {k}")
        if kind == "bare-metals" and not str(b["plan"]).startswith("vbm-"):
            return self._err(400, "Invalid plan: not a bare metal plan")
        if self.full(b["region"], b["plan"]):
            return self._err(400, f"Unable to create server: the requested plan {b['plan']} is "
                             f"not available in the selected region ({b['region']}).")
        keys = [k["ssh_key"] for k in self.ssh_keys if k["id"] in (b.get("sshkey_id") or [])]
        sid = f"{kind[:2]}-{self.next_id()}"
        srv = {"id": sid, "label": b["label"], "plan": b["plan"], "region": b["region"],
               "status": "pending", "power_status": "running", "main_ip": "0.0.0.0",
               "internal_ip": "", "os_id": b.get("os_id"), "image_id": b.get("image_id", ""),
               "tags": b.get("tags") or [], "_kind": kind, "_key": keys[0] if keys else "",
               "_installs_rocm": installs_rocm(b.get("user_data"))}
        self.machines[sid] = srv
        asyncio.get_running_loop().create_task(self._boot(srv))
        await self.wait_pause("after_create")
        return web.json_response({one: self._view(srv)}, status=202)

    async def _boot(self, srv: dict[str, Any]) -> None:
        def up(h: FakeSSHHost) -> None:
            srv["main_ip"], srv["status"] = h.host, "active"
            if srv["_installs_rocm"] and not srv.get("_rocm_ready"):
                asyncio.get_running_loop().create_task(self._first_boot_setup(srv))

        await self.boot(srv["id"], srv["_key"], up)

    def clear(self) -> None:
        super().clear()
        self.rocm_images = set()

    @property
    def ssh_keys(self) -> list[dict[str, Any]]:
        if not hasattr(self, "_ssh_keys"):
            self._ssh_keys: list[dict[str, Any]] = []
        return self._ssh_keys
