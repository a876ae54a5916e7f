"""A fake Hot Aisle API (under ``/api``, ``Authorization: Token <key>``, team-scoped) whose
VMs are fake SSH hosts, following Hot Aisle's published swagger (tests/data/hotaisle/
swagger.json, pinned with its source): every request body is checked against its
``definitions`` (``SSHKeyRequest``, ``VMProvisionRequest``) and a body it does not allow is a
400; answers have the documented shapes and status codes.

Served: ``GET /user/`` (``GetUserResponse``), ``POST /user/ssh_keys/`` (200, 409 when the key
is there already), ``GET /teams/<team>/virtual_machines/`` (the team's VMs),
``.../available/`` (``AvailableVirtualMachineTypes``: ``Quantity``, ``OnDemandPrice`` in cents
per hour, ``Specs``, ``MinimumReservationMinutes``), ``POST .../virtual_machines/`` with an
offer's ``Specs`` (200, ``VirtualMachineDetails``; 401 "Maximum VMs already provisioned for
this team" past ``vm_limit``; 402 when ``insufficient_balance``; 404 "No available virtual
machine matching requested specifications" when no offer of those specs has ``Quantity`` > 0),
``GET .../<name>/state/`` (``VirtualMachineState``: libvirt's words, "running", "shut off",
"paused"; ``set_state``), ``DELETE .../<name>/?force=true`` (204). A wrong key is 401, another
team 404. ``no_capacity`` ("*" or the GPU model) lists the matching offers with ``Quantity: 0``.
Every VM shares one SSH port (``ssh_port``, what ``SKYD_HOTAISLE_SSH_PORT`` says), each on its
own loopback address, user ``hotaisle``.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.neobase import NeoFake
from tests.fakes.specs import Spec
from tests.fakes.sshhost import FakeSSHHost

SWAGGER = Spec.swagger(Path(__file__).resolve().parent.parent / "data" / "hotaisle" / "swagger.json")


def _offer(n: int, cents: int, quantity: int = 4) -> dict[str, Any]:
    return {"OnDemandPrice": cents, "MinimumReservationMinutes": 60, "Quantity": quantity,
            "Specs": {"cpu_cores": 13 * n, "ram_capacity": 224 * n * 2**30, "disk_capacity": 12 * 2**40,
                      "cpus": {"model": "Xeon Platinum 8470", "manufacturer": "Intel", "count": 1,
                               "cores": 13 * n, "frequency": 2000000000},
                      "gpus": [{"count": n, "model": "MI300X", "manufacturer": "AMD"}]}}


OFFERS = [_offer(1, 199), _offer(8, 1592)]


class FakeHotAisle(NeoFake):
    provider = "hotaisle"
    team = "skyd-team"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.ssh_keys: list[str] = []
        self.vm_limit: int | None = None  # the team's maximum number of VMs
        self.insufficient_balance = False
        self.offers = copy.deepcopy(OFFERS)
        self.rejected: list[list[str]] = []  # what the swagger refused, per request

    def clear(self) -> None:
        super().clear()
        self.vm_limit = None
        self.insufficient_balance = False
        self.offers = copy.deepcopy(OFFERS)
        self.rejected.clear()

    def set_state(self, name: str, state: str) -> None:
        """What ``.../<name>/state/`` answers from now on (libvirt's words)."""
        self.machines[name]["_state"] = state

    def _invalid(self, body: Any, definition: str) -> web.Response | None:
        errs = SWAGGER.check(body, definition, "body")
        if not errs:
            return None
        self.rejected.append(errs)
        return self._err(400, "; ".join(errs))

    @property
    def api_url(self) -> str:
        return f"{self.url}/api"

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/api/{rest:.*}", self._serve)

    @staticmethod
    def _err(status: int, detail: str) -> web.Response:
        return web.json_response({"detail": detail}, status=status)

    def _offers(self) -> list[dict[str, Any]]:
        """The offers as listed now: those out of capacity stay listed, with Quantity 0."""
        out = []
        for o in self.offers:
            o = copy.deepcopy(o)
            if self.full(o["Specs"]["gpus"][0]["model"]):
                o["Quantity"] = 0
            out.append(o)
        return out

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Token ") or auth[6:] not in self.keys:
            return self._err(401, "Invalid token.")
        parts = [p for p in request.match_info["rest"].split("/") if p]
        m = request.method
        if parts == ["user"]:
            return web.json_response({
                "user": {"name": "skyd test", "email": "skyd@example.test", "created": "2026-01-01T00:00:00Z"},
                "teams": [{"handle": self.team, "name": "skyd team", "roles": ["owner"],
                           "effective_roles": ["owner"]}]})
        if parts == ["user", "ssh_keys"] and m == "POST":
            body = await request.json()
            bad = self._invalid(body, "SSHKeyRequest")
            if bad is not None:
                return bad
            key = body["authorized_key"]
            if key in self.ssh_keys:
                return self._err(409, "Conflict - key already registered")
            self.ssh_keys.append(key)
            return web.json_response({"authorized_key": key, "fingerprint": f"SHA256:{len(self.ssh_keys)}"})
        if len(parts) >= 3 and parts[0] == "teams" and parts[2] == "virtual_machines":
            if parts[1] != self.team:
                return self._err(404, "Not found.")
            return await self._vms(request, parts[3:])
        return self._err(404, "Not found.")

    async def _vms(self, request: web.Request, rest: list[str]) -> web.StreamResponse:
        m = request.method
        if rest == ["available"]:
            return web.json_response(self._offers())
        if not rest and m == "GET":
            return web.json_response([self._view(v) for v in self.live()])
        if not rest and m == "POST":
            body = await request.json()
            return self._invalid(body, "VMProvisionRequest") or await self._create(body)
        vm = self.machines.get(rest[0])
        if vm is None:
            return self._err(404, "Not found.")
        if rest[1:] == ["state"]:
            return web.json_response({"state": vm["_state"], "host": "enc1-host"})
        if len(rest) == 1 and m == "DELETE":
            if request.query.get("force") != "true":
                return self._err(400, "The VM is running; delete with force=true")
            await self.remove(vm["name"])
            for o in self.offers:  # the machine is free again
                if o["Specs"] == vm["specs"]:
                    o["Quantity"] += 1
            return web.Response(status=204)
        return self._err(404, "Not found.")

    @staticmethod
    def _view(v: dict[str, Any]) -> dict[str, Any]:
        return {k: x for k, x in v.items() if not k.startswith("_")}

    async def _create(self, specs: dict[str, Any]) -> web.Response:
        await self.wait_pause("before_create")
        await asyncio.sleep(self.slow_s)
        self.creates.append(dict(specs))
        if self.vm_limit is not None and len(self.machines) >= self.vm_limit:
            return self._err(401, "Maximum VMs already provisioned for this team")
        if self.insufficient_balance:
            return self._err(402, "Insufficient balance to provision virtual machine")
        if not any(o["Specs"] == specs and o["Quantity"] > 0 for o in self._offers()):
            return self._err(404, "No available virtual machine matching requested specifications")
        for o in self.offers:
            if o["Specs"] == specs:
                o["Quantity"] -= 1
        name = f"enc1-vm{self.next_id()}"
        vm = {"name": name, "ip_address": "", "specs": specs, "_state": "provisioning",
              "_key": self.ssh_keys[-1] if self.ssh_keys else ""}
        self.machines[name] = vm
        asyncio.get_running_loop().create_task(self._boot(vm))
        await self.wait_pause("after_create")
        return web.json_response({"name": name, "ip_address": vm["ip_address"]} | specs)

    async def _boot(self, vm: dict[str, Any]) -> None:
        def up(h: FakeSSHHost) -> None:
            vm["ip_address"], vm["_state"] = h.host, "running"

        # the address is known at once on Hot Aisle; the VM answers SSH once it runs
        await self.boot(vm["name"], vm["_key"], up)
