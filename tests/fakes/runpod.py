"""A fake RunPod GraphQL API (``POST /graphql``, Bearer key) whose pods are fake SSH hosts.

Served: ``myself { id email }``, ``myself { pods { ... } }``, ``gpuTypes``,
``podFindAndDeployOnDemand``, ``podRentInterruptable`` (needs ``bidPerGpu``), ``podStop``,
``podResume``, ``podTerminate``. As RunPod does, refusals of a well-formed call come back
as HTTP 200 with ``errors`` (no capacity: "There are no longer any instances available with
the requested specifications"); a wrong key is HTTP 401. A pod runs with ``runtime.ports``
holding its SSH address: a loopback IP and the public port mapped to 22 (its own port per
pod, as on RunPod). The key in the pod's ``PUBLIC_KEY`` env is the one its sshd accepts.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from tests.fakes.neobase import NeoFake
from tests.fakes.sshhost import FakeSSHHost

NO_CAPACITY = ("There are no longer any instances available with the requested specifications. "
               "Please refresh and try again.")
GPU_TYPES = [
    {"id": "AMD Instinct MI300X OAM", "displayName": "MI300X", "manufacturer": "AMD", "memoryInGb": 192,
     "securePrice": 2.49, "communityPrice": None, "secureSpotPrice": None, "communitySpotPrice": None},
    {"id": "NVIDIA H100 80GB HBM3", "displayName": "H100 SXM", "manufacturer": "Nvidia", "memoryInGb": 80,
     "securePrice": 2.99, "communityPrice": 2.69, "secureSpotPrice": 1.99, "communitySpotPrice": 1.75},
]


class FakeRunPod(NeoFake):
    provider = "runpod"

    def __init__(self, *a: Any, **kw: Any) -> None:
        kw.setdefault("shared_ssh_port", False)
        super().__init__(*a, **kw)

    @property
    def api_url(self) -> str:
        return f"{self.url}/graphql"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/graphql", self._graphql)

    @staticmethod
    def _errors(msg: str, status: int = 200) -> web.Response:
        return web.json_response({"errors": [{"message": msg, "extensions": {"code": "BAD_REQUEST"}}],
                                  "data": None}, status=status)

    async def _graphql(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth[7:] not in self.keys:
            return web.json_response({"errors": [{"message": "Unauthorized"}]}, status=401)
        body = await request.json()
        q = str(body.get("query") or "")
        inp = (body.get("variables") or {}).get("input") or {}
        if "podFindAndDeployOnDemand" in q or "podRentInterruptable" in q:
            return await self._deploy(inp, spot="podRentInterruptable" in q)
        if "podTerminate" in q:
            await self.remove(str(inp.get("podId")))
            return web.json_response({"data": {"podTerminate": None}})
        if "podStop" in q:
            pod = self.machines.get(str(inp.get("podId")))
            if pod is None:
                return self._errors("pod not found")
            pod["desiredStatus"], pod["runtime"] = "EXITED", None
            await self.halt(pod["id"])
            return web.json_response({"data": {"podStop": {"id": pod["id"], "desiredStatus": "EXITED"}}})
        if "podResume" in q:
            pod = self.machines.get(str(inp.get("podId")))
            if pod is None:
                return self._errors("pod not found")
            if self.full(pod["dataCenterId"]):
                return self._errors(NO_CAPACITY)
            pod["desiredStatus"] = "RUNNING"
            asyncio.get_running_loop().create_task(self._boot(pod))
            return web.json_response({"data": {"podResume": {"id": pod["id"], "desiredStatus": "RUNNING"}}})
        if "gpuTypes" in q:
            return web.json_response({"data": {"gpuTypes": GPU_TYPES}})
        if "pods" in q:
            return web.json_response({"data": {"myself": {"pods": [self._view(p) for p in self.live()]}}})
        if "myself" in q:
            return web.json_response({"data": {"myself": {"id": "user-1", "email": "skyd@example.test"}}})
        return self._errors(f"unsupported query: {q[:80]}", status=400)

    @staticmethod
    def _view(pod: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in pod.items() if k not in ("env", "publicKey")}

    async def _deploy(self, inp: dict[str, Any], spot: bool) -> web.Response:
        await self.wait_pause("before_create")
        await asyncio.sleep(self.slow_s)
        self.creates.append(dict(inp) | {"spot": spot})
        for k in ("name", "imageName", "gpuTypeId", "gpuCount", "cloudType"):
            if inp.get(k) in (None, ""):
                return self._errors(f"input.{k} is required")
        if spot and not inp.get("bidPerGpu"):
            return self._errors("bidPerGpu is required for an interruptible pod")
        if self.full(inp.get("dataCenterId"), inp.get("gpuTypeId")):
            return self._errors(NO_CAPACITY)
        env = {e["key"]: e["value"] for e in inp.get("env") or []}
        pid = f"pod{self.next_id()}"
        pod = {"id": pid, "name": inp["name"], "desiredStatus": "RUNNING", "costPerHr": 0.0,
               "gpuCount": inp["gpuCount"], "imageName": inp["imageName"],
               "machine": {"gpuDisplayName": inp["gpuTypeId"]}, "runtime": None,
               "dataCenterId": inp.get("dataCenterId"), "interruptible": spot,
               "publicKey": env.get("PUBLIC_KEY", "")}
        self.machines[pid] = pod
        asyncio.get_running_loop().create_task(self._boot(pod))
        await self.wait_pause("after_create")
        key = "podRentInterruptable" if spot else "podFindAndDeployOnDemand"
        return web.json_response({"data": {key: {"id": pid, "name": pod["name"], "desiredStatus": "RUNNING"}}})

    async def _boot(self, pod: dict[str, Any]) -> None:
        def up(h: FakeSSHHost) -> None:
            pod["runtime"] = {"ports": [
                {"ip": h.host, "isIpPublic": True, "privatePort": 22, "publicPort": h.port, "type": "tcp"},
                {"ip": "10.0.0.2", "isIpPublic": False, "privatePort": 22, "publicPort": 22, "type": "tcp"}]}

        await self.boot(pod["id"], pod["publicKey"], up)

    def interrupt(self, pid: str) -> None:
        """A spot pod is taken back: it stops (EXITED), its GPUs go to the higher bidder."""
        async def go() -> None:
            pod = self.machines[pid]
            pod["desiredStatus"], pod["runtime"] = "EXITED", None
            await self.halt(pid)

        self.run(go())
