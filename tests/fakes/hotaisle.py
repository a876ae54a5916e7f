"""A fake Hot Aisle API (under ``/api``, ``Authorization: Token <key>``, team-scoped) whose
VMs are fake SSH hosts.

Served: ``GET /user/``, ``POST /user/ssh_keys/`` (409 when the key is there already),
``GET /teams/<team>/virtual_machines/`` (the team's VMs), ``.../available/`` (offers:
``OnDemandPrice`` in cents per hour, ``Specs``, ``MinimumReservationMinutes``), ``POST
.../virtual_machines/`` with an offer's ``Specs`` (answers ``name`` and ``ip_address``),
``GET .../<name>/state/``, ``DELETE .../<name>/?force=true``. A wrong key is 401, another
team 404. ``no_capacity`` ("*" or the GPU model) empties the matching offers; a create of
specs no offer has is a 409. Every VM shares one SSH port (``ssh_port``, what
``SKYD_HOTAISLE_SSH_PORT`` says), each on its own loopback address, user ``hotaisle``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from tests.fakes.neobase import NeoFake
from tests.fakes.sshhost import FakeSSHHost


def _offer(n: int, cents: int) -> dict[str, Any]:
    return {"OnDemandPrice": cents, "MinimumReservationMinutes": 60,
            "Specs": {"cpu_cores": 13 * n, "ram_capacity": 224 * n * 2**30, "disk_capacity": 12 * 2**40,
                      "cpus": {"model": "Xeon Platinum 8470", "count": 1},
                      "gpus": [{"count": n, "model": "MI300X", "manufacturer": "AMD"}]}}


OFFERS = [_offer(1, 199), _offer(8, 1592)]


class FakeHotAisle(NeoFake):
    provider = "hotaisle"
    team = "skyd-team"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.ssh_keys: list[str] = []

    @property
    def api_url(self) -> str:
        return f"{self.url}/api"

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/api/{rest:.*}", self._serve)

    @staticmethod
    def _err(status: int, detail: str) -> web.Response:
        return web.json_response({"detail": detail}, status=status)

    def _offers(self) -> list[dict[str, Any]]:
        return [o for o in OFFERS if not self.full(o["Specs"]["gpus"][0]["model"])]

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Token ") or auth[6:] not in self.keys:
            return self._err(401, "Invalid token.")
        parts = [p for p in request.match_info["rest"].split("/") if p]
        m = request.method
        if parts == ["user"]:
            return web.json_response({"email": "skyd@example.test", "teams": [{"handle": self.team}]})
        if parts == ["user", "ssh_keys"] and m == "POST":
            key = (await request.json())["authorized_key"]
            if key in self.ssh_keys:
                return self._err(409, "This key already exists.")
            self.ssh_keys.append(key)
            return web.json_response({"authorized_key": key}, status=201)
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
            return await self._create(await request.json())
        vm = self.machines.get(rest[0])
        if vm is None:
            return self._err(404, "Not found.")
        if rest[1:] == ["state"]:
            return web.json_response({"state": vm["_state"]})
        if len(rest) == 1 and m == "DELETE":
            if request.query.get("force") != "true":
                return self._err(400, "The VM is running; delete with force=true")
            await self.remove(vm["name"])
            return web.Response(status=204)
        return self._err(404, "Not found.")

    @staticmethod
    def _view(v: dict[str, Any]) -> dict[str, Any]:
        return {k: x for k, x in v.items() if not k.startswith("_")}

    async def _create(self, specs: dict[str, Any]) -> web.Response:
        await self.wait_pause("before_create")
        await asyncio.sleep(self.slow_s)
        self.creates.append(dict(specs))
        if not any(o["Specs"] == specs for o in self._offers()):
            return self._err(409, "No available virtual machines match the requested specs.")
        name = f"enc1-vm{self.next_id()}"
        vm = {"name": name, "ip_address": "", "specs": specs, "_state": "provisioning",
              "_key": self.ssh_keys[-1] if self.ssh_keys else ""}
        self.machines[name] = vm
        asyncio.get_running_loop().create_task(self._boot(vm))
        await self.wait_pause("after_create")
        return web.json_response({"name": name, "ip_address": vm["ip_address"], "specs": specs}, status=201)

    async def _boot(self, vm: dict[str, Any]) -> None:
        def up(h: FakeSSHHost) -> None:
            vm["ip_address"], vm["_state"] = h.host, "running"

        # the address is known at once on Hot Aisle; the VM answers SSH once it runs
        await self.boot(vm["name"], vm["_key"], up)
