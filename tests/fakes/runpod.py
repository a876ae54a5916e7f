"""A fake RunPod GraphQL API (``POST /graphql``, Bearer key) whose pods are fake SSH hosts,
as strict as the published schema.

**Requests.** Every request is parsed and validated with graphql-core against the schema
RunPod publishes (``tests/data/runpod/schema.graphql``, pinned with its source and version):
an unknown field, a field of the wrong type, a variable declared nullable where the schema
wants it non-null, or variables that do not coerce are refused as RunPod's Apollo server
refuses them (HTTP 400, ``extensions.code`` ``GRAPHQL_VALIDATION_FAILED`` /
``BAD_USER_INPUT``). A valid request is executed, so the answer holds exactly the fields
that were selected. Refusals of a well-formed call are HTTP 200 with ``errors`` (no capacity:
"There are no longer any instances available with the requested specifications", also for a
COMMUNITY pod placed by ``dataCenterId``: data centers are Secure Cloud's, community hosts are
placed by ``countryCode``, as dstack's runpod backend reads it); a wrong key is HTTP 401. Served: ``myself``, ``gpuTypes``, ``podFindAndDeployOnDemand``,
``podRentInterruptable`` (needs ``bidPerGpu``), ``deployCpuPod`` (needs ``instanceId``, a
CPU flavor such as ``cpu3c-2-4``), ``podStop``, ``podResume``, ``podTerminate``.

**Pods behave like their image.** A pod is a container: its SSH port answers only when
something in it runs sshd. RunPod's own images (``runpod/*``) start sshd with the
``PUBLIC_KEY`` env when ``startSsh`` is set; any other image (``rocm/*``, ``vllm/*``,
``ubuntu``, a user's) has no sshd, and only a start command (``dockerArgs``) that installs
and starts it, with the key put in ``authorized_keys``, makes the pod reachable
(:func:`start_command_runs_sshd`: what it reads of the command). The GPUs of the pod's type
show to ``nvidia-smi`` on an NVIDIA pod (RunPod's hosts inject the driver into any
container, as the NVIDIA container toolkit does) and to ``amd-smi`` on an AMD pod only when
the image carries ROCm (``rocm/*``, RunPod's ``runpod/*rocm*``); with ``gpu="auto"`` (the
default) the SSH host's GPU tools report exactly that.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import inspect
import json
import re
import shlex
from pathlib import Path
from typing import Any

import graphql
from aiohttp import web

from tests.fakes.loopback import free_port
from tests.fakes.neobase import NeoFake
from tests.fakes.sshhost import FakeSSHHost

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "data" / "runpod" / "schema.graphql"
SCHEMA = graphql.build_schema(SCHEMA_PATH.read_text())


@functools.lru_cache(maxsize=256)
def _checked(query: str) -> tuple[graphql.DocumentNode, tuple[graphql.GraphQLError, ...]]:
    """A query document, parsed and validated against the schema once per text (as GraphQL
    servers cache documents; the variables of every request are still coerced)."""
    doc = graphql.parse(query)
    return doc, tuple(graphql.validate(SCHEMA, doc))

NO_CAPACITY = ("There are no longer any instances available with the requested specifications. "
               "Please refresh and try again.")

#: RunPod's GPU types: id (the name nvidia-smi / amd-smi prints), displayName, maker, memory,
#: secure/community on-demand and spot prices per GPU. Ids as SkyPilot's GPU_NAME_MAP and
#: RunPod's gpuTypes list them; prices are examples.
GPU_TYPES: list[dict[str, Any]] = [
    {"id": gid, "displayName": disp, "manufacturer": maker, "memoryInGb": mem,
     "securePrice": sp, "communityPrice": cp, "secureSpotPrice": ssp, "communitySpotPrice": csp}
    for gid, disp, maker, mem, sp, cp, ssp, csp in [
        ("AMD Instinct MI300X OAM", "MI300X", "AMD", 192, 2.49, None, None, None),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", "Nvidia", 80, 2.99, 2.69, 1.99, 1.75),
        ("NVIDIA H100 PCIe", "H100 PCIe", "Nvidia", 80, 2.39, 1.99, 1.59, 1.25),
        ("NVIDIA H100 NVL", "H100 NVL", "Nvidia", 94, 2.79, 2.59, None, None),
        ("NVIDIA H200", "H200 SXM", "Nvidia", 141, 3.99, 3.59, None, None),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe", "Nvidia", 80, 1.64, 1.19, 1.19, 0.89),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM", "Nvidia", 80, 1.89, 1.39, 1.29, 0.99),
        ("NVIDIA A40", "A40", "Nvidia", 48, 0.40, 0.35, 0.20, 0.18),
        ("NVIDIA B200", "B200", "Nvidia", 180, 5.99, None, None, None),
        ("NVIDIA L4", "L4", "Nvidia", 24, 0.43, 0.29, 0.22, 0.18),
        ("NVIDIA L40", "L40", "Nvidia", 48, 0.99, 0.69, 0.50, 0.40),
        ("NVIDIA L40S", "L40S", "Nvidia", 48, 0.86, 0.79, 0.50, 0.45),
        ("NVIDIA GeForce RTX 3090", "RTX 3090", "Nvidia", 24, 0.43, 0.22, 0.25, 0.11),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", "Nvidia", 24, 0.69, 0.34, 0.35, 0.20),
        ("NVIDIA RTX 4000 Ada Generation", "RTX 4000 Ada", "Nvidia", 20, 0.26, 0.20, 0.13, 0.10),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", "Nvidia", 48, 0.88, 0.74, 0.45, 0.38),
        ("NVIDIA RTX A4000", "RTX A4000", "Nvidia", 16, 0.32, 0.17, 0.16, 0.09),
        ("NVIDIA RTX A4500", "RTX A4500", "Nvidia", 20, 0.34, 0.19, 0.17, 0.10),
        ("NVIDIA RTX A5000", "RTX A5000", "Nvidia", 24, 0.36, 0.16, 0.18, 0.10),
        ("NVIDIA RTX A6000", "RTX A6000", "Nvidia", 48, 0.76, 0.33, 0.38, 0.25),
    ]
]
#: PCI device ids amd-smi prints for RunPod's AMD types
AMD_DEVICE = {"AMD Instinct MI300X OAM": "0x74a1"}
#: RunPod's CPU flavors (``cpu3c``: compute, ``cpu3g``: general, ``cpu3m``: memory; 5 = newer)
CPU_FLAVOR = re.compile(r"^cpu[35][cgm]-(\d+)-(\d+)$")

#: sshd started by a command (in command position: a line's start, after ; & | then do exec)
_SSHD_START = re.compile(r"(?m)(?:^\s*|[;&|]\s*|\b(?:then|do|exec)\s+)(?:/usr/sbin/sshd|sshd"
                         r"|service\s+sshd?\s+(?:re)?start|systemctl\s+(?:re)?start\s+sshd?"
                         r"|/etc/init\.d/ssh\s+(?:re)?start)(?=[\s;&|]|$)")
_SSHD_INSTALL = re.compile(r"\b(?:apt-get|apt|dnf|yum|microdnf|apk)\s+(?:-\S+\s+)*(?:install|add)\b"
                           r"[^;&|\n]*\bopenssh(?:-server)?\b")
_B64 = re.compile(r"echo\s+['\"]?([A-Za-z0-9+/=]{16,})['\"]?\s*\|\s*base64\s+(?:-d|--decode)\b")


def image_traits(image: str) -> dict[str, bool]:
    """What an image has: ``sshd`` (and a start script that runs it from PUBLIC_KEY),
    ``rocm`` (amd-smi and the ROCm userland)."""
    low = image.lower()
    runpod = low.startswith("runpod/")
    return {"sshd": runpod, "rocm": low.startswith("rocm/") or (runpod and "rocm" in low)}


def _expand(script: str) -> str:
    """The script with every ``echo <base64> | base64 -d`` payload appended, decoded."""
    out = [script]
    for m in _B64.finditer(script):
        try:
            out.append(_expand(base64.b64decode(m.group(1), validate=True).decode()))
        except (binascii.Error, UnicodeDecodeError):
            continue
    return "\n".join(out)


def start_command_runs_sshd(docker_args: str, image: str, env: dict[str, str]) -> set[str]:
    """The public keys sshd accepts once the pod's start command has run (empty: port 22
    answers nothing). Read from the command, not run: it must be a shell (``sh -c`` /
    ``bash -c``) whose script (base64 payloads decoded) installs openssh unless the image has
    it, appends a key (the ``$PUBLIC_KEY`` env or a literal key) to ``authorized_keys``,
    and starts sshd."""
    try:
        argv = shlex.split(docker_args)
    except ValueError:
        return set()
    if len(argv) < 3 or Path(argv[0]).name not in ("sh", "bash") or argv[1] != "-c":
        return set()
    script = _expand(argv[2])
    if not _SSHD_START.search(script):
        return set()
    if not image_traits(image)["sshd"] and not _SSHD_INSTALL.search(script):
        return set()
    keys: set[str] = set()
    for line in re.split(r"[;\n]|&&", script):
        if "authorized_keys" not in line:
            continue
        if re.search(r"\$\{?PUBLIC_KEY\b", line) and env.get("PUBLIC_KEY"):
            keys.add(env["PUBLIC_KEY"])
        keys.update(m.group(0) for m in re.finditer(r"ssh-(?:ed25519|rsa) [A-Za-z0-9+/=]+", line))
    return keys


class FakeRunPod(NeoFake):
    provider = "runpod"

    def __init__(self, *a: Any, **kw: Any) -> None:
        kw.setdefault("shared_ssh_port", False)
        super().__init__(*a, **kw)
        self.gpu = "auto"
        self.refused: list[str] = []  # the messages of every request refused by validation
        self.dry = False  # accept creates (all checks done) without making pods (catalog walks)

    def clear(self) -> None:
        super().clear()
        self.gpu = "auto"
        self.dry = False

    @property
    def api_url(self) -> str:
        return f"{self.url}/graphql"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/graphql", self._graphql)

    @staticmethod
    def _errors(msg: str, code: str = "BAD_REQUEST", status: int = 200) -> web.Response:
        return web.json_response({"errors": [{"message": msg, "extensions": {"code": code}}],
                                  "data": None}, status=status)

    async def _graphql(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth[7:] not in self.keys:
            return web.json_response({"errors": [{"message": "Unauthorized"}]}, status=401)
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return self._errors("POST body missing, invalid Content-Type, or JSON object has no keys.",
                                status=400)
        query, variables = body.get("query"), body.get("variables")
        if not isinstance(query, str) or not isinstance(variables, (dict, type(None))):
            return self._errors("POST body sent invalid JSON.", status=400)
        try:
            doc, invalid = _checked(query)
        except graphql.GraphQLError as e:
            self.refused.append(e.message)
            return self._errors(e.message, "GRAPHQL_PARSE_FAILED", 400)
        if invalid:
            self.refused.extend(e.message for e in invalid)
            return web.json_response({"errors": [
                {"message": e.message, "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"}}
                for e in invalid]}, status=400)
        result = graphql.execute(SCHEMA, doc, root_value=self, variable_values=variables)
        if inspect.isawaitable(result):
            result = await result
        if result.errors:
            bad_input = [e for e in result.errors if e.path is None]  # variables that did not coerce
            if bad_input:
                self.refused.extend(e.message for e in bad_input)
                return web.json_response({"errors": [
                    {"message": e.message, "extensions": {"code": "BAD_USER_INPUT"}} for e in bad_input]},
                    status=400)
            return web.json_response({"errors": [
                {"message": e.message, "path": e.path, "extensions": {"code": "BAD_REQUEST"}}
                for e in result.errors], "data": result.data})
        return web.json_response({"data": result.data})

    # -- resolvers (graphql-core calls root-value attributes with (info, **args)) ----------

    def myself(self, info: Any) -> dict[str, Any]:
        return {"id": "user-1", "email": "skyd@example.test", "authId": "auth-1",
                "pods": [self._view(p) for p in self.live()]}

    def gpuTypes(self, info: Any, input: dict[str, Any] | None = None) -> list[dict[str, Any]]:  # noqa: N802, A002
        want = (input or {}).get("id")
        return [dict(t) for t in GPU_TYPES if want in (None, t["id"])]

    async def podFindAndDeployOnDemand(self, info: Any, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802, A002
        return await self._deploy(input, "podFindAndDeployOnDemand")

    async def podRentInterruptable(self, info: Any, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802, A002
        return await self._deploy(input, "podRentInterruptable")

    async def deployCpuPod(self, info: Any, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802, A002
        return await self._deploy(input, "deployCpuPod")

    async def podTerminate(self, info: Any, input: dict[str, Any]) -> None:  # noqa: N802, A002
        if str(input["podId"]) not in self.machines:
            raise graphql.GraphQLError("pod not found")
        await self.remove(str(input["podId"]))

    async def podStop(self, info: Any, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802, A002
        pod = self.machines.get(str(input["podId"]))
        if pod is None:
            raise graphql.GraphQLError("pod not found")
        pod["desiredStatus"], pod["runtime"] = "EXITED", None
        await self.halt(pod["id"])
        return self._view(pod)

    async def podResume(self, info: Any, input: dict[str, Any]) -> dict[str, Any]:  # noqa: N802, A002
        pod = self.machines.get(str(input["podId"]))
        if pod is None:
            raise graphql.GraphQLError("pod not found")
        if self.full(pod["dataCenterId"]):
            raise graphql.GraphQLError(NO_CAPACITY)
        pod["desiredStatus"] = "RUNNING"
        asyncio.get_running_loop().create_task(self._boot(pod))
        return self._view(pod)

    # -- pods -----------------------------------------------------------------------------

    @staticmethod
    def _view(pod: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in pod.items() if k not in ("env_map", "keys", "cpu_flavor", "gpuTypeId")}

    async def _deploy(self, inp: dict[str, Any], call: str) -> dict[str, Any]:
        await self.wait_pause("before_create")
        await asyncio.sleep(self.slow_s)
        self.creates.append(dict(inp) | {"call": call, "spot": call == "podRentInterruptable"})
        cpu = call == "deployCpuPod"
        need = ("name", "imageName", "instanceId") if cpu else ("name", "imageName", "gpuTypeId", "gpuCount")
        for k in need:
            if inp.get(k) in (None, ""):
                raise graphql.GraphQLError(f"input.{k} is required")
        gpu_type = None
        if cpu:
            if not CPU_FLAVOR.match(str(inp["instanceId"])):
                raise graphql.GraphQLError(f"instanceId {inp['instanceId']!r} is not a CPU flavor")
        else:
            gpu_type = next((t for t in GPU_TYPES if t["id"] == inp["gpuTypeId"]), None)
            if gpu_type is None:
                raise graphql.GraphQLError(f"gpuTypeId {inp['gpuTypeId']!r} is not a GPU type")
            if int(inp["gpuCount"]) < 1:
                raise graphql.GraphQLError("gpuCount must be at least 1")
        if inp.get("cloudType") == "COMMUNITY" and inp.get("dataCenterId"):
            # data centers are Secure Cloud's; community hosts are found by country
            raise graphql.GraphQLError(NO_CAPACITY)
        if self.full(inp.get("dataCenterId"), inp.get("countryCode"), inp.get("gpuTypeId"), inp.get("instanceId")):
            raise graphql.GraphQLError(NO_CAPACITY)
        env = {e["key"]: e["value"] for e in inp.get("env") or []}
        image = str(inp["imageName"])
        if self.dry:
            return {"id": f"dry{self.next_id()}", "name": inp["name"], "desiredStatus": "RUNNING"}
        keys = start_command_runs_sshd(str(inp.get("dockerArgs") or ""), image, env)
        if not keys and image_traits(image)["sshd"] and inp.get("startSsh") and env.get("PUBLIC_KEY"):
            keys = {env["PUBLIC_KEY"]}  # RunPod's own images: their start script runs sshd
        pid = f"pod{self.next_id()}"
        pod: dict[str, Any] = {
            "id": pid, "name": inp["name"], "desiredStatus": "RUNNING", "costPerHr": 0.0,
            "gpuCount": 0 if cpu else int(inp["gpuCount"]), "imageName": image,
            "dockerArgs": inp.get("dockerArgs") or "", "env": [f"{k}={v}" for k, v in env.items()],
            "machine": {"gpuDisplayName": gpu_type["displayName"] if gpu_type else None,
                        "gpuTypeId": gpu_type["id"] if gpu_type else None},
            "runtime": None, "dataCenterId": inp.get("dataCenterId"),
            "interruptible": call == "podRentInterruptable",
            "env_map": env, "keys": sorted(keys), "gpuTypeId": gpu_type["id"] if gpu_type else None}
        self.machines[pid] = pod
        asyncio.get_running_loop().create_task(self._boot(pod))
        await self.wait_pause("after_create")
        return self._view(pod)

    def _gpu_profile(self, pod: dict[str, Any]) -> Any:
        """The GPU tools the pod's container shows (files under the fake's root)."""
        if self.gpu != "auto":
            return self.gpu
        gid, n = pod.get("gpuTypeId"), int(pod.get("gpuCount") or 0)
        if not gid or n < 1:
            return "none"
        d = self.root / f"gpus-{pod['id']}"
        d.mkdir(parents=True, exist_ok=True)
        if gid in AMD_DEVICE:
            if not image_traits(str(pod["imageName"]))["rocm"]:
                return "none"  # /dev/kfd is there, amd-smi is not: no GPU shows
            out = d / "amd-smi.json"
            out.write_text(json.dumps([{"gpu": i, "asic": {"market_name": gid, "device_id": AMD_DEVICE[gid]},
                                        "vram": {"size": {"value": 196592, "unit": "MB"}}} for i in range(n)]))
            return {"amd-smi": out}
        mem = next(int(t["memoryInGb"]) for t in GPU_TYPES if t["id"] == gid) * 1024
        out = d / "nvidia-smi.txt"
        out.write_text("".join(f"{gid}, {mem}, GPU-{pod['id']}-{i:04d}\n" for i in range(n)))
        return {"nvidia-smi": out}

    async def _boot(self, pod: dict[str, Any]) -> None:
        def up(h: FakeSSHHost) -> None:
            pod["runtime"] = {"uptimeInSeconds": 1, "ports": [
                {"ip": h.host, "isIpPublic": True, "privatePort": 22, "publicPort": h.port, "type": "tcp"},
                {"ip": "10.0.0.2", "isIpPublic": False, "privatePort": 22, "publicPort": 22, "type": "tcp"}]}

        if not pod["keys"]:
            # the container runs and RunPod maps its port 22, but nothing listens there
            await asyncio.sleep(self.boot_s)
            if pod["id"] in self.machines and pod["desiredStatus"] == "RUNNING":
                pod["runtime"] = {"uptimeInSeconds": 1, "ports": [
                    {"ip": "127.0.0.1", "isIpPublic": True, "privatePort": 22,
                     "publicPort": free_port(), "type": "tcp"}]}
            return
        await self.boot(pod["id"], pod["keys"][0], up)

    async def _new_host(self, mid: str, public_key: str) -> FakeSSHHost:
        pod = self.machines[mid]
        return await self.add_host(mid, self.root / f"{self.provider}-{mid}", public_key,
                                   port=0, gpu=self._gpu_profile(pod))

    def interrupt(self, pid: str) -> None:
        """A spot pod is taken back: it stops (EXITED), its GPUs go to the higher bidder."""
        async def go() -> None:
            pod = self.machines[pid]
            pod["desiredStatus"], pod["runtime"] = "EXITED", None
            await self.halt(pid)

        self.run(go())
