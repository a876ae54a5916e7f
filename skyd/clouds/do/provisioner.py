"""DOProvisioner: GPU droplets for a cluster, found by their ``skyd-cluster:<tag>`` tag, on
the shared one-machine-per-node flow (skyd.clouds.vm.provisioner). Serves ``do`` and
``amddevcloud`` (the same API at another base URL).

Droplets are created one by one (a refusal stops before more are made), named
``droplet_name(tag, rank)`` and tagged with the cluster tag, ``skyd-rank:<n>`` and the
task's labels; running = ``status == active`` with a public IPv4. A 422 on create is
classified by skyd.clouds.do.api.classify (no capacity: scope ``region``). Droplets cannot
be stopped (a powered-off GPU droplet is still billed)."""

from __future__ import annotations

from typing import Any

import anyio

from skyd.clouds.base import ClusterHandle, LogFn, ProvisionRequest
from skyd.clouds.do import config
from skyd.clouds.do.api import DOAPI, classify, cluster_tag, droplet_name, label_tags
from skyd.clouds.do.sizes import is_amd
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.vm.provisioner import FAILED, PENDING, RUNNING, STOPPED, VM, VMProvisioner
from skyd.errors import CredentialsError, FailoverScope, SkydError

SSH_USER = "root"
AMD_IMAGE = "gpu-amd-base"  # Ubuntu 24.04 with ROCm (no Docker)
NVIDIA_IMAGE = "gpu-h100x1-base"  # DO's AI/ML-ready image for one NVIDIA GPU
NVIDIA8_IMAGE = "gpu-h100x8-base"  # ... and for 8 (it adds the NVLink fabric manager)
CPU_IMAGE = "ubuntu-24-04-x64"
STATES = {"new": PENDING, "active": RUNNING, "off": STOPPED, "archive": FAILED}


def default_image(accelerator: str | None, count: float = 1) -> str:
    """DO's recommended image for the GPUs (docs: "Recommended GPU Droplet setup", AI/ML-ready
    images; dstack digitalocean_base/compute.py chooses the same): ROCm for AMD, the NVIDIA
    image for 1 GPU or the 8-GPU one (with fabric manager), plain Ubuntu for CPU droplets."""
    if is_amd(accelerator):
        return AMD_IMAGE
    if not accelerator:
        return CPU_IMAGE
    return NVIDIA8_IMAGE if count >= 8 else NVIDIA_IMAGE


def addresses(d: dict[str, Any]) -> tuple[str, str | None]:
    """(private or public IPv4, public IPv4 or None) of a droplet."""
    v4 = (d.get("networks") or {}).get("v4") or []
    pub = next((n.get("ip_address") for n in v4 if n.get("type") == "public"), None)
    priv = next((n.get("ip_address") for n in v4 if n.get("type") == "private"), None)
    return str(priv or pub or ""), pub


def to_vm(d: dict[str, Any]) -> VM:
    internal, public = addresses(d)
    return VM(id=str(d["id"]), name=str(d.get("name") or ""),
              state=STATES.get(str(d.get("status")), PENDING), host=public or "",
              internal=internal, raw=d)


class DOProvisioner(VMProvisioner):
    ssh_user = SSH_USER
    api_errors = (APIError,)
    name_key = "name"
    serial_create = True
    vanish_scope: FailoverScope = "region"  # droplets have no zones

    def __init__(self, flavor: config.Flavor) -> None:
        super().__init__()
        self.flavor = flavor
        self.NAME = flavor.name
        self._api: DOAPI | None = None
        self._fp: dict[str, str] = {}  # public key -> its registered fingerprint

    async def api(self) -> DOAPI:
        if self._api is None:
            tok = await anyio.to_thread.run_sync(config.find_token, self.flavor)
            if tok is None:
                raise CredentialsError(f"no {self.flavor.title} token found", hint=self.flavor.hint)
            self._api = DOAPI(self.flavor, tok)
        return self._api

    def _poll_s(self) -> float:
        return config.poll_s()

    def ssh_port(self, vm: VM) -> int:
        return config.ssh_port()

    def machine_name(self, tag: str, rank: int) -> str:
        return droplet_name(tag, rank)

    @staticmethod
    def image(req: ProvisionRequest) -> str:
        return req.image_id or default_image(req.offering.accelerator, req.offering.accelerator_count)

    def created_line(self, req: ProvisionRequest, n: int, where: str) -> str:
        off = req.offering
        return f"Created {n} droplet(s) in {off.region} ({off.instance_type}, image {self.image(req)})"

    def handle_extra(self, req: ProvisionRequest) -> dict[str, Any]:
        return {"image": self.image(req)}

    def hourly_cost(self, req: ProvisionRequest) -> float:
        return (req.offering.hourly(False) or 0.0) * req.num_nodes

    async def list_vms(self, tag: str, region: str | None) -> list[VM]:
        api = await self.api()
        return [to_vm(d) for d in await api.droplets(tag)]

    async def create_vm(self, req: ProvisionRequest, rank: int, name: str, public_key: str) -> None:
        api = await self.api()
        if public_key not in self._fp:
            self._fp[public_key] = await api.ensure_key(public_key)
        tags = [cluster_tag(req.cluster_tag), *label_tags(req.labels)]
        await api.call("POST", "/droplets", body={
            "name": name, "region": req.offering.region, "size": req.offering.instance_type,
            "image": self.image(req), "ssh_keys": [self._fp[public_key]],
            "tags": [*tags, f"skyd-rank:{rank}"], "backups": False, "ipv6": False,
            "monitoring": False})

    async def delete_vm(self, vm: VM) -> None:
        api = await self.api()
        try:
            await api.call("DELETE", f"/droplets/{vm.id}")
        except APIError as e:
            if e.status != 404:
                raise

    def classify(self, e: Any, where: str, has_zone: bool) -> SkydError:
        return classify(e, where=where)

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        raise SkydError(f"stopping is not supported on {self.flavor.name}: a powered-off GPU "
                        "droplet is still billed", hint=f"use `skyd down {handle.cluster_name}`")

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        raise SkydError(f"starting a stopped cluster is not supported on {self.flavor.name}")

    async def close(self) -> None:
        await super().close()
        if self._api is not None:
            await self._api.close()
