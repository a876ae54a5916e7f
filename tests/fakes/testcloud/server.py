"""A tiny "instances API" (aiohttp, 127.0.0.1 only) whose instances are local sandboxes
running real node agents (the `local` infra's machinery), for provider lifecycle tests.

It runs on its own event loop in a thread of the test process, so it outlives the daemon
processes the tests kill. Endpoints (JSON; ``Authorization: Bearer <key>``):

  GET    /v1/account                          200, or 401 for a wrong key
  POST   /v1/instances                        create {tag, cluster, region, zone,
                                              instance_type, count, token, ports, ...}
  GET    /v1/instances?tag=&region=&zone=     list (live instances only)
  DELETE /v1/instances?tag=&region=&zone=     terminate matching (idempotent)
  POST   /v1/instances/stop?tag=  /start?tag=  /ports?tag=

Knobs (set from the test): per (region, zone) failure of the next creates there
(``fail(region, zone, kind)``; kinds: capacity, capacity_after_create, quota, outage,
invalid, auth, hang), and one-shot pause points (``pause_at(point)``: before_create,
after_create, before_running) the test waits on (``reached``) and releases.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from skyd.clouds.base import ClusterHandle, PartialHandle, ProvisionRequest
from skyd.clouds.local import LocalProvisioner
from skyd.clouds.offering import Offering
from tests.fakes.loopback import LoopbackFake

KEY = "test-key"
POINTS = ("before_create", "after_create", "before_running")

_ERRORS: dict[str, tuple[int, str, str]] = {
    "capacity": (409, "InsufficientInstanceCapacity", "no capacity for {type} in {zone}"),
    "capacity_after_create": (409, "InsufficientInstanceCapacity",
                              "only part of the request could be placed in {zone}"),
    "quota": (403, "QuotaExceeded", "vCPU quota of region {region} exceeded"),
    "outage": (503, "ServiceUnavailable", "the API is unavailable"),
    "invalid": (400, "InvalidParameterValue", "image {image} does not exist"),
    "auth": (401, "AuthFailure", "the API key is not valid"),
}


@dataclass
class Group:
    """The instances of one create call (their sandboxes live under one root)."""

    gid: str
    tag: str
    cluster: str
    region: str
    zone: str | None
    body: dict[str, Any]
    root: Path
    instances: list[dict[str, Any]] = field(default_factory=list)
    handle: ClusterHandle | None = None
    boot: asyncio.Task[None] | None = None


class FakeInstancesAPI(LoopbackFake):
    thread_name = "fake-instances-api"

    def __init__(self, root: Path, key: str = KEY) -> None:
        super().__init__(root, first_ip=0)  # its instances are testcloud nodes, not SSH hosts
        self.key = key
        self.groups: dict[str, Group] = {}
        self.creates: list[dict[str, Any]] = []  # every create body received, in order
        self.terminated: list[str] = []  # instance ids
        self.deletes: list[dict[str, str]] = []  # every delete's query, in order
        self.failures: dict[tuple[str, str | None], str] = {}
        self._ids = itertools.count(1)

    # -- knobs (called from the test's thread) ---------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail(self, region: str, zone: str | None, kind: str) -> None:
        assert kind in _ERRORS or kind == "hang", kind
        self.failures[(region, zone)] = kind

    def clear_failures(self) -> None:
        self.failures.clear()

    def pause_at(self, point: str) -> None:
        assert point in POINTS, point
        super().pause_at(point)

    def live(self, tag: str | None = None) -> list[dict[str, Any]]:
        return [dict(i) for g in list(self.groups.values()) for i in g.instances
                if tag is None or g.tag == tag]

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> FakeInstancesAPI:
        self.start_server()
        return self

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/account", self._account)
        app.router.add_post("/v1/instances", self._create)
        app.router.add_get("/v1/instances", self._list)
        app.router.add_delete("/v1/instances", self._delete)
        app.router.add_post("/v1/instances/{action}", self._action)
        return app

    async def _stop_hosts(self) -> None:  # `stop`: every instance left ends (its agents too)
        await self._terminate_all()

    async def _terminate_all(self) -> None:
        for g in list(self.groups.values()):
            await self._terminate(g)

    # -- helpers ----------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.key}"

    @staticmethod
    def _error(kind: str, **fmt: Any) -> web.Response:
        status, code, text = _ERRORS[kind]
        return web.json_response({"code": code, "message": text.format(**fmt)}, status=status)

    def _match(self, request: web.Request) -> list[Group]:
        q = request.query
        return [g for g in self.groups.values()
                if g.tag == q.get("tag")
                and ("region" not in q or g.region == q["region"])
                and ("zone" not in q or (g.zone or "") == q["zone"])]

    # -- endpoints --------------------------------------------------------------------------

    async def _account(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error("auth")
        return web.json_response({"account": "fake", "regions": ["r1", "r2", "r3"]})

    async def _create(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error("auth")
        body = await request.json()
        self.creates.append(body)
        region, zone = body["region"], body.get("zone")
        kind = self.failures.get((region, zone)) or self.failures.get((region, None))
        await self.wait_pause("before_create")
        fmt = {"type": body.get("instance_type"), "zone": zone, "region": region,
               "image": body.get("image_id")}
        if kind == "hang":  # until the client gives up (or the server stops)
            while self._stop is not None and not self._stop.is_set():
                await asyncio.sleep(0.05)
        if kind is not None and kind != "capacity_after_create":
            return self._error(kind, **fmt)
        g = self._new_group(body)
        g.boot = asyncio.create_task(self._boot(g))
        if kind == "capacity_after_create":
            return self._error(kind, **fmt)  # the created instances stay: forget must find them
        await self.wait_pause("after_create")
        return web.json_response({"instances": g.instances}, status=201)

    def _new_group(self, body: dict[str, Any]) -> Group:
        gid = f"g{next(self._ids):04d}"
        g = Group(gid, body["tag"], body["cluster"], body["region"], body.get("zone"), body,
                  self.root / gid)
        for rank in range(int(body.get("count", 1))):
            g.instances.append({
                "id": f"i-{gid}-{rank}", "tag": g.tag, "rank": rank, "state": "pending",
                "region": g.region, "zone": g.zone, "instance_type": body.get("instance_type"),
                "ip": "127.0.0.1", "agent_port": 0, "node_dir": "",
                "labels": body.get("labels") or {}, "ports": body.get("ports") or [],
                "disk_size": body.get("disk_size"), "image_id": body.get("image_id"),
                "created_at": time.time(),
            })
        self.groups[gid] = g
        return g

    async def _boot(self, g: Group) -> None:
        await self.wait_pause("before_running")
        off = Offering("testcloud", str(g.body.get("instance_type")), None, 0, 2, 4, g.region,
                       g.zone, 0.0, None)
        req = ProvisionRequest(cluster_name=g.cluster, num_nodes=len(g.instances), offering=off,
                               use_spot=False, token=str(g.body.get("token") or ""))
        g.handle = await LocalProvisioner(g.root, cloud_name="testcloud").provision(req, lambda _: None)
        self._sync(g)

    def _sync(self, g: Group, state: str = "running") -> None:
        assert g.handle is not None
        for inst, node in zip(g.instances, g.handle.nodes, strict=True):
            inst.update(state=state, agent_port=node.agent_port, node_dir=node.node_dir)

    async def _list(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error("auth")
        return web.json_response({"instances": [i for g in self._match(request) for i in g.instances]})

    async def _terminate(self, g: Group) -> None:
        if g.boot is not None:
            try:  # an agent being started is stopped once it is up
                await asyncio.shield(g.boot)
            except Exception:  # noqa: BLE001 - a failed boot leaves less to remove
                pass
        prov = LocalProvisioner(g.root, cloud_name="testcloud")
        await prov.forget(PartialHandle(g.cluster, "testcloud", g.region, g.zone, g.tag))
        self.terminated.extend(i["id"] for i in g.instances)
        self.groups.pop(g.gid, None)

    async def _delete(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error("auth")
        self.deletes.append(dict(request.query))
        gone = self._match(request)
        for g in gone:
            await self._terminate(g)
        return web.json_response({"terminated": [i["id"] for g in gone for i in g.instances]})

    async def _action(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error("auth")
        action = request.match_info["action"]
        groups = [g for g in self._match(request) if g.handle is not None]
        for g in groups:
            prov = LocalProvisioner(g.root, cloud_name="testcloud")
            assert g.handle is not None
            if action == "stop":
                await prov.stop(g.handle, lambda _: None)
                self._sync(g, "stopped")
            elif action == "start":
                g.handle = await prov.start(g.handle, lambda _: None)
                self._sync(g)
            elif action == "ports":
                ports = (await request.json()).get("ports") or []
                for i in g.instances:
                    i["ports"] = sorted(set(i["ports"]) | set(ports))
            else:
                return web.json_response({"code": "NotFound", "message": action}, status=404)
        return web.json_response({"instances": [i for g in groups for i in g.instances]})
