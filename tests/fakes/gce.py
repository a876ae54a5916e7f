"""A fake Compute Engine API (aiohttp, 127.0.0.1 only) and OAuth token endpoint, whose
instances are fake SSH hosts (tests/fakes/sshhost.py) on loopback addresses 127.0.0.x.

It runs on its own event loop in a thread of the test process, so it outlives daemons the
tests kill. What it serves (under ``/compute/v1/projects/<project>``) is what the gcp driver
uses: projects.get; zonal instances insert/list(filter on ``labels.skyd-cluster``)/get/
delete/stop/start; zonal operations get/wait/list (``compute.instances.preempted``); global
firewalls insert/get/patch/delete and global operations. Errors are GCE's JSON shapes:
capacity and quota errors inside the insert operation, a machine type absent from a zone as
a synchronous 400, a stale token as 401. ``POST /token`` is the OAuth endpoint that
gcloud-aio-auth calls with the service account's signed JWT (``service_account_file()``
writes a key file whose ``token_uri`` points here).

Every instance is a real SSH server (the key from its ``ssh-keys`` metadata authorised) on
its own loopback address, all on one port (``ssh_port``, what ``SKYD_GCP_SSH_PORT`` must
say); its ``natIP`` and ``networkIP`` are that address. Stop kills its processes (the
disk, i.e. its home directory, stays); delete removes it.

Knobs: ``fail(zone, code, message, skip=0)`` (every insert in the zone after the first
``skip`` fails with that operation error), ``absent(zone, machine_type)``,
``refuse_tokens`` (the token endpoint answers invalid_grant), ``revoke()`` (issued tokens
become invalid), ``pause_at(point)`` (before_create, after_create, before_running) with
``reached`` / ``release()``, ``preempt(name)`` (the VM is deleted, a ``compute.instances.preempted``
operation stays).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.loopback import LoopbackFake, free_port
from tests.fakes.specs import Spec
from tests.fakes.sshhost import FakeSSHHost

PROJECT = "skyd-test-project"


def compute_discovery_path() -> Path:
    """compute.v1.json as google-api-python-client ships it (its package data, not a copy)."""
    import importlib.util

    spec = importlib.util.find_spec("googleapiclient")  # located, not imported
    assert spec is not None and spec.submodule_search_locations, "pip install '.[dev]'"
    return Path(list(spec.submodule_search_locations)[0]) / "discovery_cache" / "documents" / "compute.v1.json"


_COMPUTE: Spec | None = None


def compute_spec() -> Spec:
    global _COMPUTE
    if _COMPUTE is None:
        _COMPUTE = Spec.discovery(compute_discovery_path())
    return _COMPUTE


#: machine series that attach Hyperdisk only (Compute Engine docs, "Machine series comparison").
HYPERDISK_ONLY = ("a4-", "a4x-", "a3-ultragpu-", "c4-", "c4a-", "c4d-", "n4-", "n4a-", "n4d-",
                  "x4-", "m4-", "h4d-", "g4-")
#: GPUs that come with accelerator-optimized machine types (Compute Engine "GPU machine types").
_BUILTIN = (("a2-highgpu-", "A100"), ("a2-megagpu-", "A100"), ("a2-ultragpu-", "A100-80GB"),
            ("a3-highgpu-", "H100"), ("a3-edgegpu-", "H100"), ("a3-megagpu-", "H100-MEGA"),
            ("a3-ultragpu-", "H200"), ("a4-highgpu-", "B200"))
_G2_L4 = {"4": 1, "8": 1, "12": 1, "16": 1, "32": 1, "24": 2, "48": 4, "96": 8}
_ACCEL_TYPES = {"nvidia-tesla-t4": "T4", "nvidia-tesla-v100": "V100", "nvidia-tesla-p100": "P100",
                "nvidia-tesla-p4": "P4", "nvidia-l4": "L4", "nvidia-tesla-a100": "A100",
                "nvidia-a100-80gb": "A100-80GB"}
#: public image projects whose images carry the NVIDIA driver once ``install-nvidia-driver`` is
#: set (Deep Learning VM: "the driver is installed at first boot when the metadata key is True").
DLVM_PROJECT = "deeplearning-platform-release"


def gpus_of(body: dict[str, Any]) -> tuple[str, int] | None:
    """(model, count) of the GPUs an insert body asks for, or None."""
    mtype = str(body["machineType"]).rsplit("/", 1)[-1]
    for prefix, model in _BUILTIN:
        if mtype.startswith(prefix):
            return model, int(mtype.rsplit("-", 1)[-1].rstrip("g") or 1)
    if mtype.startswith("g2-standard-"):
        return "L4", _G2_L4.get(mtype.rsplit("-", 1)[-1], 1)
    for acc in body.get("guestAccelerators") or []:
        name = str(acc.get("acceleratorType", "")).rsplit("/", 1)[-1]
        return _ACCEL_TYPES.get(name, name), int(acc.get("acceleratorCount") or 0)
    return None
EMAIL = "skyd-test@skyd-test-project.iam.gserviceaccount.com"
POINTS = ("before_create", "after_create", "before_running")


def gcp_zones() -> set[str]:
    from skyd.clouds.catalog import load_catalog

    return {o.zone for o in load_catalog().by_cloud("gcp") if o.zone}


class FakeGCE(LoopbackFake):
    thread_name = "fake-gce"

    def __init__(self, root: Path, *, project: str = PROJECT, first_ip: int = 40) -> None:
        super().__init__(root, first_ip=first_ip)
        self.project = project
        self.zones = gcp_zones()
        self.instances: dict[str, dict[str, dict[str, Any]]] = {}  # zone -> name -> instance
        self.firewalls: dict[str, dict[str, Any]] = {}
        self.ops: dict[str, dict[str, Any]] = {}
        self.inserts: list[dict[str, Any]] = []  # every insert body, in order (with "zone")
        self.deleted: list[str] = []
        self.calls: list[tuple[str, str]] = []
        self.failures: dict[str, dict[str, Any]] = {}
        self.fail_next: list[dict[str, Any]] = []  # the next inserts anywhere fail, in order
        self.server_s = 0.0  # time spent answering compute requests (benchmarks)
        self.absent_types: set[tuple[str, str]] = set()
        self.rejected: list[tuple[str, list[str]]] = []  # (method, what the spec refused)
        self.driver_images: set[str] = set()  # user images that carry the NVIDIA driver
        self.project_metadata: list[dict[str, str]] = []  # commonInstanceMetadata items
        self.oslogin_keys: dict[str, list[str]] = {}  # OS Login POSIX user -> imported keys
        self.refuse_tokens = False
        self.tokens: set[str] = set()
        self.token_requests = 0
        self._ids = itertools.count(1000)
        self._private_key = ""
        self._public_key: Any = None

    # -- knobs (from the test's thread) ---------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/compute/v1"

    @property
    def oslogin_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/oslogin/v1"

    def enable_oslogin(self) -> None:
        self.project_metadata = [{"key": "enable-oslogin", "value": "TRUE"}]

    @property
    def oslogin(self) -> bool:
        return any(i["key"] == "enable-oslogin" and i["value"].lower() == "true" for i in self.project_metadata)

    @property
    def token_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def service_account_file(self, path: Path, **override: Any) -> Path:
        data = {"type": "service_account", "project_id": self.project,
                "private_key_id": "k1", "private_key": self._private_key,
                "client_email": EMAIL, "client_id": "1", "token_uri": self.token_url} | override
        path.write_text(json.dumps(data))
        path.chmod(0o600)
        return path

    def fail(self, zone: str, code: str, message: str = "", *, skip: int = 0) -> None:
        self.failures[zone] = {"code": code, "message": message or f"{code} in {zone}", "skip": skip}

    def absent(self, zone: str, machine_type: str) -> None:
        self.absent_types.add((zone, machine_type))

    def fail_next_inserts(self, n: int, code: str, message: str = "") -> None:
        self.fail_next = [{"code": code, "message": message or f"{code} (injected)", "skip": 0}] * n

    def clear(self) -> None:
        self.fail_next = []
        self.failures.clear()
        self.absent_types.clear()
        self.refuse_tokens = False
        self.rejected.clear()
        self.driver_images.clear()
        self.project_metadata = []
        self.oslogin_keys.clear()

    def reuse_ips_from(self, first: int) -> None:
        """Hand out addresses from 127.0.0.<first> again (a cloud reusing addresses)."""
        self._ips = itertools.count(first)

    def revoke(self) -> None:
        self.tokens.clear()

    def pause_at(self, point: str) -> None:
        assert point in POINTS, point
        super().pause_at(point)

    def live(self, tag: str | None = None) -> list[dict[str, Any]]:
        out = []
        for insts in list(self.instances.values()):
            for i in list(insts.values()):
                if tag is None or i["metadata_tag"] == tag:
                    out.append(dict(i))
        return out

    def preempt(self, name: str) -> None:
        self.run(self._preempt(name))

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeGCE:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._private_key = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()).decode()
        self._public_key = key.public_key()
        self.ssh_port = free_port()
        self.start_server()
        return self

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/token", self._token)
        app.router.add_post("/oslogin/v1/users/{user}", self._oslogin_import)
        app.router.add_route("*", "/compute/v1/projects/{project}", self._dispatch)
        app.router.add_route("*", "/compute/v1/projects/{project}/{rest:.*}", self._dispatch)
        return app

    # -- helpers ----------------------------------------------------------------------------

    @staticmethod
    def _err(status: int, message: str, reason: str = "", code: str | None = None) -> web.Response:
        entry: dict[str, Any] = {"message": message, "domain": "global", "reason": reason or "invalid"}
        if code:
            entry["code"] = code
        return web.json_response({"error": {"code": status, "message": message, "errors": [entry]}},
                                 status=status)

    def _op(self, zone: str | None, kind: str, target: str, *, error: dict[str, Any] | None = None,
            http: int = 400, target_id: str = "") -> dict[str, Any]:
        name = f"operation-{next(self._ids)}-{secrets.token_hex(3)}"
        op: dict[str, Any] = {"kind": "compute#operation", "name": name, "operationType": kind,
                              "status": "RUNNING", "targetLink": target, "targetId": target_id,
                              "insertTime": time.time()}
        if zone:
            op["zone"] = f"{self.url}/projects/{self.project}/zones/{zone}"
        self.ops[name] = op

        async def finish() -> None:
            await asyncio.sleep(0.05)
            op["status"] = "DONE"
            if error is not None:
                op["error"] = {"errors": [error]}
                op["httpErrorStatusCode"] = http

        asyncio.get_running_loop().create_task(finish())
        return op

    # -- endpoints --------------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        import jwt

        self.token_requests += 1
        form = await request.post()
        if self.refuse_tokens:
            return web.json_response({"error": "invalid_grant",
                                      "error_description": "Invalid JWT Signature."}, status=400)
        try:
            claims = jwt.decode(str(form.get("assertion")), self._public_key, algorithms=["RS256"],
                                audience=self.token_url)
        except jwt.PyJWTError as e:
            return web.json_response({"error": "invalid_grant", "error_description": str(e)}, status=400)
        if claims.get("iss") != EMAIL:
            return web.json_response({"error": "invalid_grant", "error_description": "bad iss"}, status=400)
        tok = "ya29.fake-" + secrets.token_hex(8)
        self.tokens.add(tok)
        return web.json_response({"access_token": tok, "expires_in": 3600, "token_type": "Bearer"})

    async def _oslogin_import(self, request: web.Request) -> web.Response:
        """OS Login ``users.importSshPublicKey`` (oslogin v1): ``users/{user}:importSshPublicKey``,
        body ``{"key": ...}``, query ``projectId``; answers the login profile."""
        if request.headers.get("Authorization", "").removeprefix("Bearer ") not in self.tokens:
            return self._err(401, "Request had invalid authentication credentials.", "authError")
        user, _, verb = request.match_info["user"].partition(":")
        body = await request.json()
        if verb != "importSshPublicKey" or set(body) - {"key", "expirationTimeUsec", "name"} or "key" not in body:
            return self._err(400, f"Invalid JSON payload for {verb}: {sorted(body)}", "invalid")
        if user != EMAIL:
            return self._err(403, f"The caller does not have permission for users/{user}", "forbidden")
        posix = "sa_" + str(abs(hash(user)) % 10**12)
        self.oslogin_keys.setdefault(posix, []).append(str(body["key"]))
        return web.json_response({"loginProfile": {"name": user, "posixAccounts": [
            {"primary": True, "username": posix, "uid": "1001", "gid": "1001",
             "homeDirectory": f"/home/{posix}", "operatingSystemType": "LINUX",
             "accountId": request.query.get("projectId", self.project)}]}})

    async def _dispatch(self, request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        try:
            return await self._serve(request)
        finally:
            self.server_s += time.perf_counter() - t0

    async def _serve(self, request: web.Request) -> web.Response:
        self.calls.append((request.method, request.path))
        if request.headers.get("Authorization", "").removeprefix("Bearer ") not in self.tokens:
            return self._err(401, "Request had invalid authentication credentials.", "authError",
                             "UNAUTHENTICATED")
        if request.match_info["project"] != self.project:
            return self._err(404, f"The resource 'projects/{request.match_info['project']}' was not found",
                             "notFound")
        parts = [p for p in request.match_info.get("rest", "").split("/") if p]
        m = request.method
        if not parts and m == "GET":
            return web.json_response({"kind": "compute#project", "name": self.project, "id": "42",
                                      "commonInstanceMetadata": {"kind": "compute#metadata",
                                                                 "items": self.project_metadata}})
        if parts[:1] == ["zones"] and len(parts) >= 3:
            zone = parts[1]
            if zone not in self.zones:
                return self._err(404, f"The resource 'projects/{self.project}/zones/{zone}' was not found",
                                 "notFound")
            rest = parts[2:]
            if rest[0] == "operations":
                return await self._operations(request, rest[1:], zone)
            if rest[0] == "instances":
                return await self._instances(request, zone, rest[1:])
        if parts[:1] == ["global"] and len(parts) >= 2:
            if parts[1] == "operations":
                return await self._operations(request, parts[2:], None)
            if parts[1] == "firewalls":
                return await self._firewalls(request, parts[2:])
        return self._err(404, f"fake GCE does not serve {m} {request.path}", "notFound")

    async def _operations(self, request: web.Request, rest: list[str], zone: str | None) -> web.Response:
        if not rest:
            flt = request.query.get("filter", "")
            items = [o for o in self.ops.values()
                     if o.get("operationType") in flt and f'"{o.get("targetId")}"' in flt]
            return web.json_response({"items": items})
        op = self.ops.get(rest[0])
        if op is None:
            return self._err(404, f"operation {rest[0]} not found", "notFound")
        if rest[1:] == ["wait"]:
            for _ in range(200):
                if op["status"] == "DONE":
                    break
                await asyncio.sleep(0.01)
        return web.json_response(op)

    async def _instances(self, request: web.Request, zone: str, rest: list[str]) -> web.Response:
        insts = self.instances.setdefault(zone, {})
        m = request.method
        if not rest and m == "GET":
            flt = request.query.get("filter", "")
            want = flt.split("=", 1)[1].strip() if "labels.skyd-cluster" in flt else None
            items = [self._view(i) for i in insts.values()
                     if want is None or i["labels"].get("skyd-cluster") == want]
            return web.json_response({"kind": "compute#instanceList", "items": items})
        if not rest and m == "POST":
            return await self._insert(request, zone, insts)
        name = rest[0]
        inst = insts.get(name)
        if inst is None:
            return self._err(404, f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
                             "was not found", "notFound")
        if len(rest) == 1 and m == "GET":
            return web.json_response(self._view(inst))
        if len(rest) == 1 and m == "DELETE":
            await self._delete(zone, name)
            return web.json_response(self._op(zone, "delete", name, target_id=inst["id"]))
        if rest[1:] == ["stop"] and m == "POST":
            inst["status"] = "STOPPING"
            h = self.hosts.get(name)
            if h is not None:
                await h.stop()
            inst["status"] = "TERMINATED"
            return web.json_response(self._op(zone, "stop", name, target_id=inst["id"]))
        if rest[1:] == ["start"] and m == "POST":
            if inst["status"] == "TERMINATED":
                inst["status"] = "STAGING"
                asyncio.get_running_loop().create_task(self._boot(zone, name))
            return web.json_response(self._op(zone, "start", name, target_id=inst["id"]))
        return self._err(404, f"fake GCE does not serve {m} {request.path}", "notFound")

    def _view(self, inst: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in inst.items() if k not in ("metadata_tag",)}

    def _invalid(self, body: dict[str, Any], schema: str, method: str) -> web.Response | None:
        """400 for a body the published Compute API would refuse (compute.v1.json plus the
        cross-field rules its descriptions and the Compute Engine docs state)."""
        errs = compute_spec().check(body, schema, "resource", method=method)
        if schema == "Instance" and not errs:
            errs = self._instance_rules(body)
        if not errs:
            return None
        self.rejected.append((method, errs))
        return self._err(400, "Invalid value for field " + "; ".join(errs), "invalid")

    def _instance_rules(self, body: dict[str, Any]) -> list[str]:
        sched = body.get("scheduling") or {}
        mtype = str(body["machineType"]).rsplit("/", 1)[-1]
        out = []
        spot = sched.get("provisioningModel") == "SPOT" or sched.get("preemptible") is True
        if spot and sched.get("onHostMaintenance", "TERMINATE") != "TERMINATE":
            # Scheduling.onHostMaintenance: "For preemptible instances, the default and only
            # possible behavior is TERMINATE."
            out.append("'resource.scheduling.onHostMaintenance': 'MIGRATE'. Scheduling must "
                       "have preemptible be false when OnHostMaintenance isn't TERMINATE.")
        if spot and sched.get("automaticRestart") is True:
            out.append("'resource.scheduling.automaticRestart': Preemptible instances cannot be "
                       "automatically restarted.")
        if gpus_of(body) and sched.get("onHostMaintenance", "MIGRATE") != "TERMINATE":
            out.append("'resource.scheduling.onHostMaintenance': Instances with guest "
                       "accelerators do not support live migration.")
        if mtype.startswith(HYPERDISK_ONLY):
            for d in body.get("disks") or []:
                dt = str((d.get("initializeParams") or {}).get("diskType", "pd-standard")).rsplit("/", 1)[-1]
                if not dt.startswith("hyperdisk-"):
                    out.append(f"'resource.disks[0].initializeParams.diskType': '{dt}'. "
                               f"Machine type {mtype} does not support disk type {dt}; use Hyperdisk.")
        return out

    async def _insert(self, request: web.Request, zone: str, insts: dict[str, Any]) -> web.Response:
        body = await request.json()
        self.inserts.append(body | {"zone": zone})
        await self.wait_pause("before_create")
        bad = self._invalid(body, "Instance", "compute.instances.insert")
        if bad is not None:
            return bad
        name = str(body["name"])
        mtype = str(body["machineType"]).rsplit("/", 1)[-1]
        if (zone, mtype) in self.absent_types:
            return self._err(400, f"Invalid value for field 'resource.machineType': "
                             f"'{body['machineType']}'. Machine type with name '{mtype}' does not "
                             f"exist in zone '{zone}'.", "invalid")
        if name in insts:
            return self._err(409, f"The resource 'projects/{self.project}/zones/{zone}/instances/"
                             f"{name}' already exists", "alreadyExists")
        fail = self.failures.get(zone) or (self.fail_next.pop(0) if self.fail_next else None)
        if fail is not None:
            if fail["skip"] > 0:
                fail["skip"] -= 1
            else:
                return web.json_response(self._op(zone, "insert", name, http=503 if "EXHAUSTED" in fail["code"] else 403,
                                                  error={"code": fail["code"], "message": fail["message"]}))
        meta = {i["key"]: i["value"] for i in (body.get("metadata") or {}).get("items") or []}
        inst = {
            "kind": "compute#instance", "id": str(next(self._ids)), "name": name,
            "zone": zone, "machineType": body["machineType"], "status": "PROVISIONING",
            "labels": dict(body.get("labels") or {}), "tags": body.get("tags") or {},
            "scheduling": body.get("scheduling") or {}, "metadata": body.get("metadata") or {},
            "guestAccelerators": body.get("guestAccelerators") or [], "disks": body.get("disks") or [],
            "networkInterfaces": [{"network": "global/networks/default", "networkIP": "",
                                   "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}]}],
            "metadata_tag": meta.get("skyd-cluster", ""), "ssh_keys": meta.get("ssh-keys", ""),
        }
        insts[name] = inst
        op = self._op(zone, "insert", name, target_id=inst["id"])
        asyncio.get_running_loop().create_task(self._boot(zone, name))
        await self.wait_pause("after_create")
        return web.json_response(op)

    async def _boot(self, zone: str, name: str) -> None:
        await self.wait_pause("before_running")
        inst = self.instances.get(zone, {}).get(name)
        if inst is None:
            return
        inst["status"] = "STAGING"
        h = self.hosts.get(name)
        if h is None:
            h = await self._new_host(name, inst)
        else:
            await h.start()
        if self.instances.get(zone, {}).get(name) is not inst:  # deleted meanwhile
            await h.stop()
            return
        nic = inst["networkInterfaces"][0]
        nic["networkIP"] = h.host
        nic["accessConfigs"][0]["natIP"] = h.host
        inst["status"] = "RUNNING"

    def gpu_profile(self, inst: dict[str, Any]) -> str:
        """What nvidia-smi shows on the VM: its GPUs when the image has the driver (a Deep
        Learning VM image booted with ``install-nvidia-driver: True``, or an image registered
        in ``driver_images``), else nothing (no driver: no nvidia-smi)."""
        gpus = gpus_of(inst)
        if gpus is None:
            return "none"
        image = str(((inst.get("disks") or [{}])[0].get("initializeParams") or {}).get("sourceImage", ""))
        meta = {i["key"]: i["value"] for i in (inst.get("metadata") or {}).get("items") or []}
        dlvm = f"projects/{DLVM_PROJECT}/" in image and str(meta.get("install-nvidia-driver")).lower() == "true"
        if not (dlvm or image in self.driver_images):
            return "none"
        return f"nvidia:{gpus[0]}:{gpus[1]}"

    async def _new_host(self, name: str, inst: dict[str, Any]) -> FakeSSHHost:
        """With OS Login on, the guest ignores ``ssh-keys`` metadata: only keys imported to an
        OS Login profile log in, as that profile's POSIX user."""
        root = self.root / name
        if self.oslogin:
            users = sorted(self.oslogin_keys)
            line = self.oslogin_keys[users[0]][-1] if users else "ssh-ed25519 AAAAnone"
        else:
            line = inst["ssh_keys"].split(":", 1)[1] if ":" in inst["ssh_keys"] else ""
        h = await self.add_host(name, root, line, port=self.ssh_port, gpu=self.gpu_profile(inst))
        if self.oslogin:
            h.users = set(self.oslogin_keys)
        return h

    async def _delete(self, zone: str, name: str) -> None:
        self.instances.get(zone, {}).pop(name, None)
        self.deleted.append(name)
        await self.drop_host(name)

    async def _preempt(self, name: str) -> None:
        """A spot preemption: with instanceTerminationAction DELETE the VM goes away."""
        for zone, insts in list(self.instances.items()):
            inst = insts.get(name)
            if inst is not None:
                assert inst["scheduling"].get("instanceTerminationAction") == "DELETE", inst["scheduling"]
                await self._delete(zone, name)
                self._op(zone, "compute.instances.preempted", name, target_id=inst["id"])

    async def _firewalls(self, request: web.Request, rest: list[str]) -> web.Response:
        m = request.method
        if not rest and m == "POST":
            body = await request.json()
            bad = self._invalid(body, "Firewall", "compute.firewalls.insert")
            if bad is not None:
                return bad
            if body["name"] in self.firewalls:
                return self._err(409, f"firewall {body['name']} already exists", "alreadyExists")
            self.firewalls[body["name"]] = body
            return web.json_response(self._op(None, "insert", body["name"]))
        if not rest:
            return web.json_response({"items": list(self.firewalls.values())})
        fw = self.firewalls.get(rest[0])
        if fw is None:
            return self._err(404, f"The resource 'projects/{self.project}/global/firewalls/{rest[0]}' "
                             "was not found", "notFound")
        if m == "GET":
            return web.json_response(fw)
        if m == "PATCH":
            body = await request.json()
            bad = self._invalid(body, "Firewall", "compute.firewalls.patch")
            if bad is not None:
                return bad
            fw.update(body)
            return web.json_response(self._op(None, "patch", rest[0]))
        if m == "DELETE":
            self.firewalls.pop(rest[0], None)
            return web.json_response(self._op(None, "delete", rest[0]))
        return self._err(404, "unsupported", "notFound")
