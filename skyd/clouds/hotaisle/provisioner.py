"""HotAisleProvisioner: one Hot Aisle VM per node, made from an available offer's specs.

Create: the offer in ``GET /teams/<team>/virtual_machines/available/`` whose GPUs match the
instance type (``8x-MI300X``) is posted back as the body of ``POST .../virtual_machines/``;
the answer names the VM and its ``ip_address``, recorded at once (skyd.clouds.hotaisle.
records). No matching offer with ``Quantity`` > 0 is a capacity refusal (an offer listed
with ``Quantity: 0`` is never posted). The create's documented refusals (Hot Aisle's swagger):
401 "Maximum VMs already provisioned for this team" is the team's VM limit, not a bad key (the
same key has just listed the offers): scope ``region`` (Hot Aisle has one), the cloud is not
blocked and its check stays good; 402 "Insufficient balance": scope ``cloud``; 404 "No
available virtual machine matching requested specifications": capacity. State: ``GET
.../<name>/state/`` answers libvirt's words ("running", "shut off", "paused", ...).
Delete: ``DELETE .../<name>/?force=true`` (404 is done). The VMs come with ROCm; SSH user
``hotaisle`` with skyd's key uploaded once to ``/user/ssh_keys/``. Hot Aisle bills a minimum
reservation however short the VM's life; the plan shows it (skyd.clouds.billing).
"""

from __future__ import annotations

from typing import Any

import anyio

from skyd import settings as knobs
from skyd.clouds.base import ProvisionRequest
from skyd.clouds.hotaisle import records
from skyd.clouds.hotaisle.api import KEY_HINT, HotAisleAPI, find_key
from skyd.clouds.neocloud import settings
from skyd.clouds.neocloud.classify import classify
from skyd.clouds.neocloud.gpus import canonical_gpu
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.vm.provisioner import (
    FAILED,
    PENDING,
    RUNNING,
    STOPPED,
    VM,
    VMProvisioner,
    vm_name,
)
from skyd.errors import CredentialsError, ResourcesUnavailableError, SkydError

NAME = "hotaisle"
#: VirtualMachineState.state ("Values can include \"running\", \"shut off\", \"paused\"":
#: libvirt's domain states) -> the base's states; anything else is still pending.
STATES = {"running": RUNNING, "active": RUNNING, "idle": RUNNING, "blocked": RUNNING,
          "shut off": STOPPED, "shutoff": STOPPED, "stopped": STOPPED, "paused": STOPPED,
          "pmsuspended": STOPPED, "in shutdown": STOPPED, "shutdown": STOPPED,
          "crashed": FAILED, "failed": FAILED, "error": FAILED, "deleted": FAILED}


def parse_type(instance_type: str) -> tuple[int, str]:
    """``8x-MI300X`` -> (8, "MI300X")."""
    n, _, model = instance_type.partition("x-")
    return (int(n) if n.isdigit() else 1), model


def matching_offer(offers: list[dict[str, Any]], count: int, model: str) -> dict[str, Any] | None:
    """The first offer of ``count`` x ``model`` that has a machine left (``Quantity`` > 0)."""
    for o in offers:
        if int(o.get("Quantity") or 0) <= 0:
            continue
        gpus = (o.get("Specs") or {}).get("gpus") or []
        if gpus and int(gpus[0].get("count") or 0) == count and \
                canonical_gpu(NAME, str(gpus[0].get("model") or "")) == model:
            return o
    return None


class HotAisleProvisioner(VMProvisioner):
    NAME = NAME
    ssh_user = "hotaisle"
    poll_env = "SKYD_HOTAISLE_POLL_S"

    def __init__(self) -> None:
        super().__init__()
        self._api: HotAisleAPI | None = None
        self._conf: dict[str, Any] = {}

    async def api(self) -> HotAisleAPI:
        if self._api is None:
            def load() -> tuple[str | None, str | None, str, dict[str, Any]]:
                return (*find_key(), settings.section(NAME))

            key, team, where, self._conf = await anyio.to_thread.run_sync(load)
            if not key:
                raise CredentialsError("no Hot Aisle API key found", hint=KEY_HINT)
            if not team:
                raise CredentialsError(f"no Hot Aisle team (the key is from {where})", hint=KEY_HINT)
            self._api = HotAisleAPI(key, team, where)
        return self._api

    def ssh_port(self, vm: VM) -> int:
        return int(knobs.HOTAISLE_SSH_PORT.get() or self._conf.get("ssh_port") or 22)

    async def list_vms(self, tag: str, region: str | None) -> list[VM]:
        mine = await records.names(tag)
        intents = await records.pending(tag)
        if not mine and not intents:
            return []
        api = await self.api()
        have = {str(v.get("name")): v for v in await api.call("GET", api.vms()) or []}
        if intents:  # creates sent by a daemon that died before their answer was recorded
            await self._adopt(tag, intents, have)
            mine = await records.names(tag)
        out = []
        for rank, name in sorted(mine.items()):
            v = have.get(name)
            if v is None:
                await records.drop(tag, name)  # deleted (by us or outside skyd)
                continue
            try:
                st = str((await api.call("GET", api.vms(f"{name}/state/")) or {}).get("state") or "")
            except APIError as e:
                if e.status != 404:
                    raise
                await records.drop(tag, name)
                continue
            out.append(VM(id=name, name=vm_name(tag, rank), state=STATES.get(st.strip().lower(), PENDING),
                          host=str(v.get("ip_address") or ""), raw=v | {"state": st, "_tag": tag}))
        return out

    async def _adopt(self, tag: str, intents: dict[int, dict[str, Any]],
                     have: dict[str, dict[str, Any]]) -> None:
        taken = await records.claimed()
        for rank, it in sorted(intents.items()):
            new = [n for n, v in have.items() if n not in set(it.get("before") or []) and n not in taken
                   and (v.get("specs") is None or v.get("specs") == it.get("specs"))]
            if new:
                await records.put(tag, rank, sorted(new)[0])
                taken.add(sorted(new)[0])
            else:
                await records.cancel(tag, rank)  # the create never made a VM

    async def create_vm(self, req: ProvisionRequest, rank: int, name: str, public_key: str) -> None:
        api = await self.api()
        off = req.offering
        count, model = parse_type(off.instance_type)
        await api.upload_key(public_key)
        offer = matching_offer(await api.available(), count, model)
        if offer is None:
            raise ResourcesUnavailableError(
                f"hotaisle/{off.region}: no {count}x {model} VM is available now", scope="region",
                provider_message="no matching offer in virtual_machines/available/")
        before = [str(v.get("name")) for v in await api.call("GET", api.vms()) or []]
        await records.intend(req.cluster_tag, rank, before, offer["Specs"])
        try:
            made = await api.call("POST", api.vms(), offer["Specs"], auth_refusal=False)
        except APIError as e:
            await records.cancel(req.cluster_tag, rank)
            if e.status == 401:  # the same key just listed the offers: the team's VM limit
                raise ResourcesUnavailableError(
                    f"hotaisle/{off.region}: team {api.team!r} has reached its maximum number of VMs",
                    scope="region", provider_message=f"HTTP 401: {e.message}",
                    hint="delete a VM of the team (admin.hotaisle.app) or ask Hot Aisle to raise "
                         "the team's limit") from None
            if e.status == 402:
                raise ResourcesUnavailableError(
                    f"hotaisle/{off.region}: team {api.team!r} has insufficient balance",
                    scope="cloud", provider_message=f"HTTP 402: {e.message}",
                    hint="add credits to the team (admin.hotaisle.app > Billing)") from None
            raise
        await records.put(req.cluster_tag, rank, str(made["name"]))

    async def delete_vm(self, vm: VM) -> None:
        api = await self.api()
        try:
            await api.call("DELETE", api.vms(f"{vm.id}/"), params={"force": "true"})
        except APIError as e:
            if e.status != 404:
                raise
        await records.drop(str(vm.raw.get("_tag")), vm.id)

    def classify(self, e: APIError, where: str, has_zone: bool) -> SkydError:
        return classify(e, where=where, has_zone=has_zone, cred_hint=KEY_HINT)

    async def close(self) -> None:
        await super().close()
        if self._api is not None:
            await self._api.close()
