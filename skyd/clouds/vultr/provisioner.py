"""VultrProvisioner: one bare-metal server (``vbm-...`` plans) or GPU VM per node, labelled
for the cluster's tag and found again by label (also tagged ``skyd-cluster=<tag>``).

Create: ``POST /bare-metals`` or ``POST /instances`` with the region, plan, label, skyd's
SSH key (uploaded once to ``/ssh-keys``) and the OS (``vultr.os_id``, default Ubuntu 22.04;
``resources.image_id`` a number is an os_id, anything else a snapshot/marketplace image_id).
An AMD offer on the default OS also gets first-boot ``user_data`` that installs ROCm
(skyd.clouds.vultr.rocm), and its agent is deployed once that is done.
Running = ``status == active`` with a ``main_ip`` (and ``power_status`` running for VMs).
Stop/start are ``halt``/``start``; delete is ``DELETE`` (404 is done).
"""

from __future__ import annotations

import re
from typing import Any

import anyio

from skyd import settings as knobs
from skyd.clouds.base import ClusterHandle, LogFn, ProvisionRequest
from skyd.clouds.neocloud import settings
from skyd.clouds.neocloud.classify import classify
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.vm.provisioner import FAILED, PENDING, RUNNING, STOPPED, VM, VMProvisioner, of_tag
from skyd.clouds.vultr import rocm
from skyd.clouds.vultr.api import KEY_HINT, VultrAPI, find_key
from skyd.errors import CredentialsError, SkydError
from skyd.models.accelerators import get_accelerator_info

NAME = "vultr"
UBUNTU_2204 = 1743
CAPACITY = re.compile(r"not available|out of stock|no (more )?servers|sold out|insufficient", re.I)


def is_metal(plan: str) -> bool:
    return plan.startswith("vbm-")


def to_vm(raw: dict[str, Any], metal: bool) -> VM:
    st = str(raw.get("status") or "")
    power = str(raw.get("power_status") or "running")
    ip = str(raw.get("main_ip") or "")
    if ip in ("0.0.0.0", "::"):
        ip = ""
    if st == "active" and power == "stopped":
        state = STOPPED
    elif st == "active":
        state = RUNNING
    elif st in ("suspended", "closed"):
        state = FAILED
    else:
        state = PENDING
    return VM(id=str(raw["id"]), name=str(raw.get("label") or ""), state=state, host=ip,
              internal=str(raw.get("internal_ip") or "") or ip,
              raw=raw | {"_metal": metal})


class VultrProvisioner(VMProvisioner):
    NAME = NAME
    ssh_user = "root"
    poll_env = "SKYD_VULTR_POLL_S"

    def __init__(self) -> None:
        super().__init__()
        self._api: VultrAPI | None = None
        self._conf: dict[str, Any] = {}

    async def api(self) -> VultrAPI:
        if self._api is None:
            def load() -> tuple[str | None, str, dict[str, Any]]:
                key, where = find_key()
                return key, where, settings.section("vultr")

            key, where, self._conf = await anyio.to_thread.run_sync(load)
            if not key:
                raise CredentialsError("no Vultr API key found", hint=KEY_HINT)
            self._api = VultrAPI(key, where)
        return self._api

    def ssh_port(self, vm: VM) -> int:
        return int(knobs.VULTR_SSH_PORT.get() or self._conf.get("ssh_port") or 22)

    async def list_vms(self, tag: str, region: str | None) -> list[VM]:
        api = await self.api()
        out = [to_vm(m, True) for m in await api.list_all("bare-metals", "bare_metals")]
        out += [to_vm(i, False) for i in await api.list_all("instances", "instances")]
        return [v for v in out if of_tag(v.name, tag)]

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        await self.api()  # loads the vultr: section the image note reads
        log(self.image_note(req))
        return await super().provision(req, log)

    def installs_rocm(self, req: ProvisionRequest) -> bool:
        """An AMD offer on the default OS: ROCm is installed at first boot."""
        info = get_accelerator_info(req.offering.accelerator or "")
        return bool(info is not None and info.vendor == "amd" and not req.image_id
                    and not self._conf.get("os_id"))

    def ready_marker(self, req: ProvisionRequest) -> str | None:
        return rocm.READY if self.installs_rocm(req) else None

    def image_note(self, req: ProvisionRequest) -> str:
        """One launch-log line naming the OS/image the nodes get (and, for an AMD offer on
        the default OS, that ROCm is installed at first boot)."""
        img = req.image_id or ""
        if img and not img.isdigit():
            return f"Image: image_id {img}"
        os_id = int(img or self._conf.get("os_id") or UBUNTU_2204)
        note = f"Image: os_id {os_id}" + (" (Ubuntu 22.04)" if os_id == UBUNTU_2204 else "")
        if self.installs_rocm(req):
            note += (f" with ROCm {rocm.ROCM_VERSION} installed at first boot (user data; minutes, "
                     "then a reboot). To skip it, set `resources.image_id` (or `vultr.os_id` in "
                     "config.yaml) to a ROCm snapshot or marketplace image of your account")
        return note

    async def create_vm(self, req: ProvisionRequest, rank: int, name: str, public_key: str) -> None:
        api = await self.api()
        off = req.offering
        body: dict[str, Any] = {
            "region": off.region, "plan": off.instance_type, "label": name, "hostname": name,
            "sshkey_id": [await api.ssh_key_id(public_key)], "tags": [f"skyd-cluster={req.cluster_tag}",
                                                             *(f"{k}={v}" for k, v in req.tags())],
        }
        img = req.image_id or ""
        if img.isdigit() or not img:
            body["os_id"] = int(img or self._conf.get("os_id") or UBUNTU_2204)
        else:
            body["image_id"] = img
        if self.installs_rocm(req):
            body["user_data"] = rocm.user_data()
        if is_metal(off.instance_type):
            await api.call("POST", "bare-metals", body)
        else:
            await api.call("POST", "instances", body)

    async def delete_vm(self, vm: VM) -> None:
        api = await self.api()
        path = ("bare-metals" if vm.raw.get("_metal") else "instances") + f"/{vm.id}"
        try:
            await api.call("DELETE", path)
        except APIError as e:
            if e.status != 404:
                raise

    async def stop_vm(self, vm: VM) -> None:
        api = await self.api()
        if vm.raw.get("_metal"):
            await api.call("POST", f"bare-metals/{vm.id}/halt")
        else:
            await api.call("POST", f"instances/{vm.id}/halt")

    async def start_vm(self, vm: VM) -> None:
        api = await self.api()
        await api.call("POST", ("bare-metals" if vm.raw.get("_metal") else "instances") + f"/{vm.id}/start")

    def classify(self, e: APIError, where: str, has_zone: bool) -> SkydError:
        return classify(e, where=where, has_zone=has_zone, cred_hint=KEY_HINT,
                        capacity=bool(CAPACITY.search(e.message)) or None)

    async def close(self) -> None:
        await super().close()
        if self._api is not None:
            await self._api.close()
