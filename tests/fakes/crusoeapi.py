"""A fake Crusoe Cloud API v1alpha5 (aiohttp, 127.0.0.1 only) that VERIFIES every request's
HMAC-SHA256 signature (``Authorization: Bearer 1.0:<access key>:<sig>`` over path, sorted
query, method and ``X-Crusoe-Timestamp``, within 5 minutes) with its own implementation.

Served: ``GET /projects``; ``GET /capacities``; ``GET /projects/{p}/quotas``; under
``/projects/{p}/compute/vms``: ``GET /types``, ``GET/POST /instances``, ``DELETE
/instances/{id}``, ``GET /instances/operations/{op}``. Create and delete answer an
operation (``IN_PROGRESS``) that finishes after ``op_s`` seconds (a slow operation); a
finished create's VM is a fake SSH host on 127.0.0.x (``ssh_public_key`` authorised),
``STATE_CREATING`` until its host is up, then ``STATE_RUNNING``.

Strict as Crusoe documents the create (no machine-readable spec exists): a body with a
field the reference does not list, without name/type/location/ssh_public_key, or of an
unknown type is refused 400 ``bad_request`` (``refused`` keeps the reasons). A VM has the
GPUs of its type, shown to ``nvidia-smi`` / ``amd-smi`` only when its image carries the
driver stack (``ubuntu-rocm``: ROCm; ``*-nvidia-*``: NVIDIA); plain Ubuntu shows none.

Knobs: ``dry`` (accept creates without making VMs), ``capacity[(type, location)]`` (what /capacities lists), ``fail_in_operation(location)``
(capacity listed, but the create operation FAILS with ``out_of_stock``: the race a real
cloud has), ``gpu_quota`` (max GPUs of the project), ``access_key``/``secret_key`` (the valid
pair), ``op_s``, plus ``rate_limit``/``boot_s`` (tests/fakes/vmapi.py).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import secrets
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.gpuprofile import profile
from tests.fakes.vmapi import FakeVMAPI

PROJECT = "4b3e1c2a-0000-4000-8000-00000000c0de"
#: VM types as ``GET .../compute/vms/types`` lists them (the fields gpuhunt's
#: providers/crusoe.py reads: product_name, gpu_type, num_gpu, cpu_cores, memory_gb, disk_gb,
#: cpu_type)
TYPES = [
    {"product_name": "mi300x-192gb.8x", "gpu_type": "MI300X-192GB", "num_gpu": 8, "cpu_cores": 176,
     "memory_gb": 1920, "disk_gb": 0, "cpu_type": "amd"},
    {"product_name": "mi355x-288gb.8x", "gpu_type": "MI355X_288GB", "num_gpu": 8, "cpu_cores": 224,
     "memory_gb": 3072, "disk_gb": 0, "cpu_type": "amd"},
    {"product_name": "h100-80gb-sxm-ib.8x", "gpu_type": "H100-SXM-80GB", "num_gpu": 8, "cpu_cores": 176,
     "memory_gb": 1440, "disk_gb": 7680, "cpu_type": "intel"},
    {"product_name": "l40s-48gb.1x", "gpu_type": "L40S-48GB", "num_gpu": 1, "cpu_cores": 8,
     "memory_gb": 147, "disk_gb": 0, "cpu_type": "amd"},
    {"product_name": "c1a.16x", "gpu_type": "", "num_gpu": 0, "cpu_cores": 16, "memory_gb": 64,
     "disk_gb": 0, "cpu_type": "amd"},
]

#: the create body's fields (Crusoe API reference, "Create a VM", v1alpha5) and the required ones
CREATE_FIELDS = frozenset({"name", "type", "location", "image", "ssh_public_key", "startup_script",
                           "shutdown_script", "disks", "host_channel_adapters", "network_interfaces",
                           "commitment_period", "reservation_id", "public_ip_address_type"})
CREATE_REQUIRED = ("name", "type", "location", "ssh_public_key")
#: a type's gpu_type -> the card its VMs have (what nvidia-smi / amd-smi print)
GPU_CARD = {"MI300X-192GB": "MI300X", "MI355X_288GB": "MI355X", "H100-SXM-80GB": "H100-SXM",
            "L40S-48GB": "L40S"}


def image_stack(image: str) -> tuple[bool, bool]:
    """(ROCm, NVIDIA driver + CUDA) of a Crusoe image (``ubuntu-rocm:latest``,
    ``ubuntu22.04-nvidia-sxm-docker:latest``, ``ubuntu22.04-nvidia-pcie-docker:latest``,
    ``ubuntu22.04:latest``)."""
    low = image.lower()
    return "rocm" in low, "nvidia" in low


def _sign(secret: str, path: str, query: dict[str, str], method: str, ts: str) -> str:
    q = "&".join(f"{k}={query[k]}" for k in sorted(query))
    key = base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4))
    mac = hmac.new(key, f"{path}\n{q}\n{method}\n{ts}\n".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


class FakeCrusoe(FakeVMAPI):
    def __init__(self, root: Path, *, first_ip: int, ssh_port: int = 0) -> None:
        super().__init__(root, first_ip=first_ip, ssh_port=ssh_port)
        self.access_key = "AK" + secrets.token_hex(6)
        self.secret_key = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
        self.project = PROJECT
        self.capacity: dict[tuple[str, str], int] = {}
        self.failing: set[str] = set()
        self.gpu_quota = 64
        self.op_s = 0.1
        self.instances: dict[str, dict[str, Any]] = {}
        self.ops: dict[str, dict[str, Any]] = {}
        self.creates: list[dict[str, Any]] = []
        self.refused: list[str] = []  # the messages of every create refused as malformed
        self.dry = False  # accept creates (every check done) without making VMs
        self._ids = itertools.count(1)
        self.clear()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1alpha5"

    def clear(self) -> None:
        self.reset()
        self.op_s = 0.1
        self.bad_signatures = 0
        self.failing.clear()
        self.dry = False
        self.gpu_quota = 64
        self.capacity = {("mi300x-192gb.8x", "us-east1-a"): 4, ("mi355x-288gb.8x", "us-east1-a"): 2,
                         ("mi300x-192gb.8x", "us-southcentral1-a"): 2}

    def fail_in_operation(self, location: str) -> None:
        self.failing.add(location)

    def live(self) -> list[dict[str, Any]]:
        return [dict(i) for i in list(self.instances.values())]

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/v1alpha5/{rest:.*}", self._serve)

    @staticmethod
    def _err(status: int, code: str, message: str) -> web.Response:
        return web.json_response({"code": code, "message": message, "error_id": secrets.token_hex(4)},
                                 status=status)

    def _verify(self, request: web.Request) -> web.Response | None:
        auth = request.headers.get("Authorization", "")
        ts = request.headers.get("X-Crusoe-Timestamp", "")
        parts = auth.removeprefix("Bearer ").split(":")
        if len(parts) != 3 or parts[0] != "1.0" or parts[1] != self.access_key:
            return self._err(401, "unauthorized", "invalid access key")
        try:
            age = abs(time.time() - datetime.fromisoformat(ts).timestamp())
        except ValueError:
            age = 1e9
        want = _sign(self.secret_key, request.path, dict(request.query), request.method, ts)
        if age > 300 or not hmac.compare_digest(want, parts[2]):
            self.bad_signatures += 1
            return self._err(401, "unauthorized", "signature does not match")
        return None

    async def _serve(self, request: web.Request) -> web.Response:
        refused = self._verify(request)
        if refused is not None:
            return refused
        parts = [p for p in request.match_info["rest"].split("/") if p]
        m = request.method
        if parts == ["projects"]:
            return web.json_response({"items": [{"id": self.project, "name": "default"}]})
        if parts == ["capacities"]:
            want = request.query.get("product_name")
            return web.json_response({"items": [
                {"type": t, "location": loc, "quantity": q} for (t, loc), q in self.capacity.items()
                if want in (None, t)]})
        if len(parts) < 2 or parts[0] != "projects" or parts[1] != self.project:
            return self._err(403, "forbidden", "no access to this project")
        rest = parts[2:]
        if rest == ["quotas"]:
            used = sum(self._gpus(i["type"]) for i in self.instances.values())
            return web.json_response({"quotas": [{"category": "GPU", "programmatic_name": "gpu-mi300x",
                                                  "max": self.gpu_quota, "used": used}]})
        if rest[:2] != ["compute", "vms"]:
            return self._err(404, "not_found", f"fake Crusoe does not serve {m} {request.path}")
        rest = rest[2:]
        if rest == ["types"]:
            return web.json_response({"items": TYPES})
        if rest == ["instances"] and m == "GET":
            return web.json_response({"items": list(self.instances.values())})
        if rest == ["instances"] and m == "POST":
            return await self._create(await request.json())
        if rest == ["instances", "operations"] and m == "GET":
            return web.json_response({"items": list(self.ops.values())})
        if rest[:2] == ["instances", "operations"] and len(rest) == 3:
            op = self.ops.get(rest[2])
            return web.json_response(op) if op else self._err(404, "not_found", "no such operation")
        if len(rest) == 2 and rest[0] == "instances" and m == "DELETE":
            inst = self.instances.get(rest[1])
            if inst is None:
                return self._err(404, "not_found", "instance not found")
            inst["state"] = "STATE_DELETING"
            return web.json_response({"operation": self._op(self._delete(rest[1]))})
        return self._err(404, "not_found", f"fake Crusoe does not serve {m} {request.path}")

    @staticmethod
    def _gpus(vm_type: str) -> int:
        return next((int(t["num_gpu"]) for t in TYPES if t["product_name"] == vm_type), 0)

    def _op(self, work: Any) -> dict[str, Any]:
        oid = f"op-{next(self._ids)}-{secrets.token_hex(3)}"
        op: dict[str, Any] = {"operation_id": oid, "state": "IN_PROGRESS", "metadata": {},
                              "started_at": datetime.now().isoformat()}
        self.ops[oid] = op

        async def run() -> None:
            await asyncio.sleep(self.op_s)
            try:
                op["result"] = await work
                op["state"] = "SUCCEEDED"
            except _OpFailed as e:
                op["result"] = {"code": e.args[0], "message": e.args[1]}
                op["state"] = "FAILED"

        asyncio.get_running_loop().create_task(run())
        return dict(op)

    def _invalid(self, body: Any) -> str | None:
        if not isinstance(body, dict):
            return "request body must be a JSON object"
        unknown = sorted(set(body) - CREATE_FIELDS)
        if unknown:
            return f"unknown field(s): {', '.join(unknown)}"
        for k in CREATE_REQUIRED:
            if not isinstance(body.get(k), str) or not body[k]:
                return f"{k} is required"
        if body["type"] not in {t["product_name"] for t in TYPES}:
            return f"unknown VM type {body['type']!r}"
        if not isinstance(body.get("disks", []), list):
            return "disks must be a list"
        return None

    async def _create(self, body: dict[str, Any]) -> web.Response:
        self.creates.append(body)
        bad = self._invalid(body)
        if bad:
            self.refused.append(bad)
            return self._err(400, "bad_request", bad)
        vtype, loc = str(body.get("type")), str(body.get("location"))
        if self._gpus(vtype) and sum(self._gpus(i["type"]) for i in self.instances.values()) \
                + self._gpus(vtype) > self.gpu_quota:
            return self._err(400, "quota_exceeded", f"GPU quota exceeded for project {self.project}")
        if self.capacity.get((vtype, loc), 0) <= 0:
            return self._err(400, "out_of_stock", f"{vtype} is out of stock in {loc}")
        if any(i["name"] == body.get("name") for i in self.instances.values()):
            return self._err(409, "already_exists", f"an instance named {body.get('name')} exists")
        if self.dry:
            return web.json_response({"operation": {"operation_id": "dry", "state": "SUCCEEDED",
                                                    "metadata": {}, "result": {}}})
        return web.json_response({"operation": self._op(self._make(body))})

    async def _make(self, body: dict[str, Any]) -> dict[str, Any]:
        await self.wait_pause("in_operation")
        loc = str(body["location"])
        if loc in self.failing:
            raise _OpFailed("out_of_stock", f"no {body['type']} hosts left in {loc}")
        iid = f"{secrets.token_hex(4)}-vm"
        inst = {"id": iid, "name": body["name"], "type": body["type"], "location": loc,
                "state": "STATE_CREATING", "image": body.get("image"), "network_interfaces": []}
        self.instances[iid] = inst
        asyncio.get_running_loop().create_task(self._boot(iid, str(body["ssh_public_key"])))
        return dict(inst)

    async def _boot(self, iid: str, public_key: str) -> None:
        await asyncio.sleep(self.boot_s)
        await self.wait_pause("before_running")
        if iid not in self.instances:
            return
        inst = self.instances[iid]  # the host has the GPUs its type names, if its image shows them
        t = next(t for t in TYPES if t["product_name"] == inst["type"])
        rocm, cuda = image_stack(str(inst.get("image") or ""))
        h = await self.new_host(iid, public_key, profile(self.root / f"gpus-{iid}", GPU_CARD.get(t["gpu_type"]),
                                                         int(t["num_gpu"]), rocm=rocm, cuda=cuda))
        inst = self.instances.get(iid)
        if inst is None:
            await self.drop_host(iid)
            return
        inst["network_interfaces"] = [{"ips": [{"private_ipv4": {"address": h.host},
                                                "public_ipv4": {"address": h.host, "type": "static"}}]}]
        inst["state"] = "STATE_RUNNING"

    async def _delete(self, iid: str) -> dict[str, Any]:
        self.instances.pop(iid, None)
        await self.drop_host(iid)
        return {"id": iid}


class _OpFailed(Exception):
    pass
