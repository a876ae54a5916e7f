"""CrusoeProvisioner: VMs for a cluster, named ``<tag>-<rank>`` (found again by name), each
created as an operation that is polled, with node agents deployed over SSH
(skyd.clouds.gcp.nodes).

A create whose operation is still running when the daemon dies makes its VM later; so
`provision` and `forget` first wait (up to OP_WAIT_S) until no instance operation that may
be the cluster's is in progress, then look for the cluster's VMs by name.

Before creating, the location's capacity (``GET /capacities``) and the project's GPU quota
are read: a location without capacity fails the attempt at once (no create is sent). A
catalog region of ``default`` (the bundled rows) means "the first location with capacity".
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import anyio

from skyd.clouds.base import (
    NODE_PENDING,
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    NODE_UNKNOWN,
    ClusterHandle,
    LogFn,
    NodeHandle,
    PartialHandle,
    Provisioner,
    ProvisionRequest,
)
from skyd.clouds.crusoe import config
from skyd.clouds.crusoe.api import CrusoeAPI, classify
from skyd.clouds.do.rest import APIError
from skyd.clouds.gcp import nodes
from skyd.clouds.ssh.provisioner import SSHProvisioner
from skyd.errors import CredentialsError, ResourcesUnavailableError, SkydError
from skyd.transports.agent_deploy import agent_zipapp, gather

SSH_USER = "ubuntu"
ROCM_IMAGE = "ubuntu-rocm:latest"  # any MI3xx type (as dstack does)
NVIDIA_IMAGE = "ubuntu22.04-nvidia-sxm-docker:latest"
CPU_IMAGE = "ubuntu22.04:latest"
ANY_LOCATION = "default"
OP_WAIT_S = 300.0
STATES = {"STATE_CREATING": NODE_PENDING, "STATE_STARTING": NODE_PENDING, "STATE_RUNNING": NODE_RUNNING,
          "STATE_STOPPING": NODE_PENDING, "STATE_SHUTOFF": NODE_STOPPED, "STATE_STOPPED": NODE_STOPPED,
          "STATE_DELETING": NODE_TERMINATED}
_BAD = re.compile(r"[^a-z0-9-]+")


def instance_name(tag: str, rank: int) -> str:
    base = _BAD.sub("-", tag.lower()).strip("-") or "skyd"
    if base != tag or len(base) > 50:
        base = base[:50].rstrip("-") + "-" + hashlib.sha256(tag.encode()).hexdigest()[:6]
    return f"{base}-{rank}"


def default_image(vm_type: str, accelerator: str | None) -> str:
    if "mi3" in vm_type.lower():
        return ROCM_IMAGE
    return NVIDIA_IMAGE if accelerator else CPU_IMAGE


def addresses(inst: dict[str, Any]) -> tuple[str, str | None]:
    nics = inst.get("network_interfaces") or [{}]
    ips = (nics[0].get("ips") or [{}])[0]
    pub = (ips.get("public_ipv4") or {}).get("address") or None
    priv = (ips.get("private_ipv4") or {}).get("address") or None
    return str(priv or pub or ""), pub


class CrusoeProvisioner(Provisioner):
    def __init__(self) -> None:
        self._api: CrusoeAPI | None = None
        self._ssh = SSHProvisioner()
        self._zipapp: tuple[Path, str] | None = None
        self._sent: dict[str, bool] = {}

    async def api(self) -> CrusoeAPI:
        if self._api is None:
            keys = await anyio.to_thread.run_sync(config.find_keys)
            if keys is None:
                raise CredentialsError("no Crusoe keys found", hint=config.HINT)
            self._api = CrusoeAPI(keys)
        return self._api

    async def _mine(self, api: CrusoeAPI, tag: str, n: int | None = None) -> dict[str, dict[str, Any]]:
        """The cluster's instances by name (ranks below ``n``, or any rank)."""
        prefix = instance_name(tag, 0)[:-1]
        out = {}
        for i in await api.instances():
            name = str(i.get("name") or "")
            rank = name[len(prefix):]
            if name.startswith(prefix) and rank.isdigit() and (n is None or int(rank) < n):
                out[name] = i
        return out

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

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        off, tag = req.offering, req.cluster_tag
        self._sent.setdefault(tag, False)
        api = await self.api()
        where = f"crusoe/{off.region}"
        key, pub = await nodes.ssh_key()
        want = {instance_name(tag, r): r for r in range(req.num_nodes)}
        image = req.image_id or default_image(off.instance_type, off.accelerator)
        try:
            await self._settle(api, tag)
            have = await self._mine(api, tag)
            stale = [i for n, i in have.items() if n not in want or str(i.get("state")) in
                     ("STATE_SHUTOFF", "STATE_STOPPED", "STATE_DELETING")]
            if stale:
                await gather([(self._delete, api, str(i["id"])) for i in stale])
            todo = [n for n in want if n not in have or have[n] in stale]
            location = str(next(iter(have.values()))["location"]) if have and not stale else off.region
            if todo:
                location = await self._location(api, off.instance_type, location, len(todo), where)
                await self._quota(api, off.accelerator_count * len(todo), where)
                where = f"crusoe/{location}"
            self._sent[tag] = True
            for n in todo:  # one by one: a refusal stops before more VMs are made
                op = await api.vm("POST", "/instances", body={
                    "name": n, "type": off.instance_type, "location": location, "image": image,
                    "ssh_public_key": pub, "disks": [], "startup_script": ""})
                await api.wait(op, config.poll_s())
            if todo:
                log(f"Created {len(todo)} VM(s) in {location} ({off.instance_type}, image {image})")
            running = await self._wait_running(api, tag, list(want), where)
        except APIError as e:
            raise classify(e, where=where) from None
        hnodes = [self._node(running[n], r, req.num_nodes, key) for n, r in sorted(want.items(), key=lambda x: x[1])]
        await nodes.forget_host_keys([(str(h.ssh["host"]), int(h.ssh["port"])) for h in hnodes
                                      if h.ssh and h.extra.get("name") in todo])
        zipapp = await self._zip()
        await gather([(nodes.deploy, self._ssh, n, req.cluster_name, req.token, zipapp, log) for n in hnodes])
        return ClusterHandle(
            cluster_name=req.cluster_name, cloud="crusoe", region=location, zone=None,
            instance_type=off.instance_type, use_spot=False,
            accelerators={off.accelerator: off.accelerator_count} if off.accelerator else {},
            num_nodes=req.num_nodes, hourly_cost=(off.hourly(False) or 0.0) * req.num_nodes,
            nodes=hnodes, token=req.token, cpus=off.vcpus, memory_gib=off.memory_gib, tag=tag,
            extra={"image": image, "project": api.project_id},
        )

    async def _zip(self) -> tuple[Path, str]:
        if self._zipapp is None:
            self._zipapp = await agent_zipapp()
        return self._zipapp

    def _node(self, inst: dict[str, Any], rank: int, n: int, key: Path) -> NodeHandle:
        internal, external = addresses(inst)
        node = nodes.node_handle(rank, str(inst["id"]), internal, external or internal, num_nodes=n,
                                 cluster="", user=SSH_USER, port=config.ssh_port(), key=key, external=external)
        node.extra["name"] = str(inst.get("name") or "")
        return node

    async def _wait_running(self, api: CrusoeAPI, tag: str, names: list[str], where: str) -> dict[str, dict[str, Any]]:
        while True:
            have = await self._mine(api, tag)
            missing = [n for n in names if n not in have]
            if missing:
                raise ResourcesUnavailableError(f"{where}: VM {missing[0]} vanished while starting", scope="region")
            if all(have[n].get("state") == "STATE_RUNNING" and addresses(have[n])[1] for n in names):
                return have
            await anyio.sleep(config.poll_s())

    async def _delete(self, api: CrusoeAPI, iid: str) -> None:
        try:
            op = await api.vm("DELETE", f"/instances/{iid}")
            await api.wait(op, config.poll_s())
        except APIError as e:
            if e.status != 404:
                raise

    async def query(self, handle: ClusterHandle) -> list[str]:
        api = await self.api()
        have = {str(i["id"]): i for i in (await self._mine(api, handle.cluster_tag)).values()}
        return [NODE_TERMINATED if (i := have.get(n.instance_id)) is None
                else STATES.get(str(i.get("state")), NODE_UNKNOWN) for n in handle.nodes]

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        raise SkydError("stopping is not supported on crusoe", hint=f"use `skyd down {handle.cluster_name}`")

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        raise SkydError("starting a stopped cluster is not supported on crusoe")

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        return await self._ssh.ensure_agents(handle, log)

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        await nodes.drop_transports(self._ssh, handle.nodes)
        n = await self._remove(handle.cluster_tag, [x.instance_id for x in handle.nodes])
        log(f"Deleted {n} VM(s) of {handle.cluster_name!r}")

    async def forget(self, partial: PartialHandle) -> None:
        try:
            await self._settle(await self.api(), partial.tag)
            await self._remove(partial.tag, [])
        except CredentialsError:
            if self._sent.get(partial.tag) is False:
                return
            raise

    async def _remove(self, tag: str, ids: list[str]) -> int:
        api = await self.api()
        todo = {str(i["id"]) for i in (await self._mine(api, tag)).values()}  # ``ids`` not listed: gone
        await gather([(self._delete, api, i) for i in sorted(todo)])
        return len(todo)

    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        return await self._ssh.agent_endpoint(handle, rank)

    async def sync_dir(self, handle: ClusterHandle, rank: int, src: str, dst: str,
                       excludes: list[str]) -> tuple[int, int]:
        return await self._ssh.sync_dir(handle, rank, src, dst, excludes)

    async def close(self) -> None:
        await self._ssh.close()
        if self._api is not None:
            await self._api.close()
