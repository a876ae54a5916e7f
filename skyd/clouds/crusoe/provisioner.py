"""CrusoeProvisioner: VMs for a cluster, named ``<tag>-<rank>`` (found again by name), each
created as an operation that is polled, on the shared one-machine-per-node flow
(skyd.clouds.vm.provisioner).

A create whose operation is still running when the daemon dies makes its VM later; so
`provision` and `forget` first wait (up to OP_WAIT_S) until no instance operation that may
be the cluster's is in progress, then look for the cluster's VMs by name.

Before creating, the location's capacity (``GET /capacities``) and the project's GPU quota
are read: a location without capacity fails the attempt at once (no create is sent). A
catalog region of ``default`` (the bundled rows) means "the first location with capacity".
"""

from __future__ import annotations

from typing import Any

import anyio

from skyd.clouds.base import ClusterHandle, LogFn, PartialHandle, ProvisionRequest
from skyd.clouds.crusoe import config
from skyd.clouds.crusoe.api import CrusoeAPI, classify
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.neocloud.names import plain_name
from skyd.clouds.vm.provisioner import FAILED, PENDING, RUNNING, STOPPED, VM, VMProvisioner
from skyd.errors import CredentialsError, FailoverScope, ResourcesUnavailableError, SkydError

SSH_USER = "ubuntu"
ROCM_IMAGE = "ubuntu-rocm:latest"  # any MI3xx type (as dstack does)
NVIDIA_IMAGE = "ubuntu22.04-nvidia-sxm-docker:latest"  # SXM types (``h100-80gb-sxm-ib.8x``)
NVIDIA_PCIE_IMAGE = "ubuntu22.04-nvidia-pcie-docker:latest"  # PCIe types (``l40s-48gb.1x``)
CPU_IMAGE = "ubuntu22.04:latest"
ANY_LOCATION = "default"
OP_WAIT_S = 300.0
STATES = {"STATE_RUNNING": RUNNING, "STATE_SHUTOFF": STOPPED, "STATE_STOPPED": STOPPED,
          "STATE_DELETING": FAILED}  # creating, starting, stopping: pending


instance_name = plain_name  # ``<tag>-<rank>``


def default_image(vm_type: str, accelerator: str | None) -> str:
    """Crusoe's image with the type's driver stack (as dstack's crusoe/compute.py picks it):
    ROCm for MI3xx types, the NVIDIA SXM image for ``-sxm`` types and the PCIe one for the
    other NVIDIA types, plain Ubuntu for CPU types."""
    if "mi3" in vm_type.lower():
        return ROCM_IMAGE
    if not accelerator:
        return CPU_IMAGE
    return NVIDIA_IMAGE if "-sxm" in vm_type.lower() else NVIDIA_PCIE_IMAGE


def addresses(inst: dict[str, Any]) -> tuple[str, str | None]:
    nics = inst.get("network_interfaces") or [{}]
    ips = (nics[0].get("ips") or [{}])[0]
    pub = (ips.get("public_ipv4") or {}).get("address") or None
    priv = (ips.get("private_ipv4") or {}).get("address") or None
    return str(priv or pub or ""), pub


def to_vm(inst: dict[str, Any]) -> VM:
    internal, public = addresses(inst)
    return VM(id=str(inst["id"]), name=str(inst.get("name") or ""),
              state=STATES.get(str(inst.get("state")), PENDING), host=public or "",
              internal=internal, raw=inst)


class CrusoeProvisioner(VMProvisioner):
    NAME = "crusoe"
    ssh_user = SSH_USER
    api_errors = (APIError,)
    name_key = "name"
    serial_create = True
    vanish_scope: FailoverScope = "region"  # VMs have no zones

    def __init__(self) -> None:
        super().__init__()
        self._api: CrusoeAPI | None = None
        self._loc: dict[str, str] = {}  # tag -> the location its VMs are made in

    async def api(self) -> CrusoeAPI:
        if self._api is None:
            keys = await anyio.to_thread.run_sync(config.find_keys)
            if keys is None:
                raise CredentialsError("no Crusoe keys found", hint=config.HINT)
            self._api = CrusoeAPI(keys)
        return self._api

    def _poll_s(self) -> float:
        return config.poll_s()

    def ssh_port(self, vm: VM) -> int:
        return config.ssh_port()

    def machine_name(self, tag: str, rank: int) -> str:
        return instance_name(tag, rank)

    @staticmethod
    def image(req: ProvisionRequest) -> str:
        return req.image_id or default_image(req.offering.instance_type, req.offering.accelerator)

    async def list_vms(self, tag: str, region: str | None) -> list[VM]:
        """The cluster's instances, by name."""
        prefix = instance_name(tag, 0)[:-1]
        api = await self.api()
        return [to_vm(i) for i in await api.instances()
                if str(i.get("name") or "").startswith(prefix)
                and str(i.get("name") or "")[len(prefix):].isdigit()]

    async def _settle(self, api: CrusoeAPI, tag: str) -> None:
        """Wait while an instance operation that may be this cluster's is in progress (one
        whose metadata names another instance is not)."""
        prefix = instance_name(tag, 0)[:-1]

        def maybe_ours(op: dict[str, Any]) -> bool:
            name = (op.get("metadata") or {}).get("name")
            return not name or str(name).startswith(prefix)

        with anyio.move_on_after(OP_WAIT_S):
            while any(o.get("state") == "IN_PROGRESS" and maybe_ours(o) for o in await api.operations()):
                await anyio.sleep(config.poll_s())

    async def _location(self, api: CrusoeAPI, vm_type: str, region: str, need: int, where: str) -> str:
        caps = await api.capacities(vm_type)
        have = {str(c.get("location")): int(c.get("quantity") or 0) for c in caps
                if str(c.get("type") or vm_type) == vm_type}
        if region != ANY_LOCATION:
            if have.get(region, 0) < need:
                raise ResourcesUnavailableError(
                    f"{where}: no capacity for {vm_type} in {region}", scope="region",
                    provider_message=f"capacities: {have.get(region, 0)} {vm_type} in {region}")
            return region
        for loc, q in sorted(have.items()):
            if q >= need:
                return loc
        raise ResourcesUnavailableError(f"{where}: no location has {need} {vm_type} free", scope="region",
                                        provider_message=f"capacities: {have}")

    async def _quota(self, api: CrusoeAPI, gpus: float, where: str) -> None:
        if gpus <= 0:
            return
        try:
            quotas = await api.quotas()
        except APIError as e:
            if e.status == 404:
                return
            raise
        for q in quotas:
            name = f"{q.get('category', '')} {q.get('programmatic_name', '')}".lower()
            if "gpu" in name and q.get("max") is not None:
                free = float(q["max"]) - float(q.get("used") or 0)
                if free < gpus:
                    raise ResourcesUnavailableError(
                        f"{where}: the project's GPU quota is used up ({free:g} of {q['max']} free, "
                        f"{gpus:g} needed)", scope="cloud", provider_message=str(q.get("programmatic_name")),
                        hint="ask Crusoe for a higher quota (console > Quotas)")

    async def prepare(self, req: ProvisionRequest, kept: dict[str, VM], todo: list[str],
                      where: str) -> str:
        off = req.offering
        api = await self.api()
        location = str(next(iter(kept.values())).raw["location"]) if kept else off.region or ANY_LOCATION
        location = await self._location(api, off.instance_type, location, len(todo), where)
        await self._quota(api, off.accelerator_count * len(todo), where)
        self._loc[req.cluster_tag] = location
        return f"crusoe/{location}"

    def handle_region(self, req: ProvisionRequest) -> str | None:
        return self._loc.get(req.cluster_tag, req.offering.region)

    def handle_extra(self, req: ProvisionRequest) -> dict[str, Any]:
        return {"image": self.image(req), "project": self._api.project_id if self._api else ""}

    def hourly_cost(self, req: ProvisionRequest) -> float:
        return (req.offering.hourly(False) or 0.0) * req.num_nodes

    def created_line(self, req: ProvisionRequest, n: int, where: str) -> str:
        return (f"Created {n} VM(s) in {self.handle_region(req)} ({req.offering.instance_type}, "
                f"image {self.image(req)})")

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        self._loc.pop(req.cluster_tag, None)
        self._sent.setdefault(req.cluster_tag, False)  # a refused settle: nothing was made
        await self._settle(await self.api(), req.cluster_tag)
        return await super().provision(req, log)

    async def create_vm(self, req: ProvisionRequest, rank: int, name: str, public_key: str) -> None:
        api = await self.api()
        op = await api.vm("POST", "/instances", body={
            "name": name, "type": req.offering.instance_type, "image": self.image(req),
            "location": self._loc.get(req.cluster_tag, req.offering.region),
            "ssh_public_key": public_key, "disks": [], "startup_script": ""})
        await api.wait(op, config.poll_s())

    async def delete_vm(self, vm: VM) -> None:
        api = await self.api()
        try:
            op = await api.vm("DELETE", f"/instances/{vm.id}")
            await api.wait(op, config.poll_s())
        except APIError as e:
            if e.status != 404:
                raise

    def classify(self, e: Any, where: str, has_zone: bool) -> SkydError:
        return classify(e, where=where)

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        raise SkydError("stopping is not supported on crusoe", hint=f"use `skyd down {handle.cluster_name}`")

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        raise SkydError("starting a stopped cluster is not supported on crusoe")

    async def forget(self, partial: PartialHandle) -> None:
        try:
            await self._settle(await self.api(), partial.tag)
        except CredentialsError:
            if self._sent.get(partial.tag) is False:
                return
            raise
        await super().forget(partial)

    async def close(self) -> None:
        await super().close()
        if self._api is not None:
            await self._api.close()
