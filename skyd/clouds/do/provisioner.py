"""DOProvisioner: GPU droplets for a cluster, found by their ``skyd-cluster:<tag>`` tag,
with node agents deployed over SSH (skyd.clouds.gcp.nodes). Serves ``do`` and
``amddevcloud`` (the same API at another base URL)."""

from __future__ import annotations

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
from skyd.clouds.do import config
from skyd.clouds.do.api import DOAPI, classify, cluster_tag, droplet_name, label_tags
from skyd.clouds.do.rest import APIError
from skyd.clouds.do.sizes import is_amd
from skyd.clouds.gcp import nodes
from skyd.clouds.ssh.provisioner import SSHProvisioner
from skyd.errors import CredentialsError, ResourcesUnavailableError, SkydError
from skyd.transports.agent_deploy import agent_zipapp, gather

SSH_USER = "root"
AMD_IMAGE = "gpu-amd-base"  # Ubuntu 24.04 with ROCm (no Docker)
NVIDIA_IMAGE = "gpu-h100x1-base"
CPU_IMAGE = "ubuntu-24-04-x64"
STATUSES = {"new": NODE_PENDING, "active": NODE_RUNNING, "off": NODE_STOPPED, "archive": NODE_TERMINATED}


def default_image(accelerator: str | None) -> str:
    if is_amd(accelerator):
        return AMD_IMAGE
    return NVIDIA_IMAGE if accelerator else CPU_IMAGE


def addresses(d: dict[str, Any]) -> tuple[str, str | None]:
    """(private or public IPv4, public IPv4 or None) of a droplet."""
    v4 = (d.get("networks") or {}).get("v4") or []
    pub = next((n.get("ip_address") for n in v4 if n.get("type") == "public"), None)
    priv = next((n.get("ip_address") for n in v4 if n.get("type") == "private"), None)
    return str(priv or pub or ""), pub


class DOProvisioner(Provisioner):
    def __init__(self, flavor: config.Flavor) -> None:
        self.flavor = flavor
        self._api: DOAPI | None = None
        self._ssh = SSHProvisioner()
        self._zipapp: tuple[Path, str] | None = None
        self._sent: dict[str, bool] = {}  # tag -> whether this process sent a create

    async def api(self) -> DOAPI:
        if self._api is None:
            tok = await anyio.to_thread.run_sync(config.find_token, self.flavor)
            if tok is None:
                raise CredentialsError(f"no {self.flavor.title} token found", hint=self.flavor.hint)
            self._api = DOAPI(self.flavor, tok)
        return self._api

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        off, tag = req.offering, req.cluster_tag
        self._sent.setdefault(tag, False)
        api = await self.api()
        where = f"{self.flavor.name}/{off.region}"
        key, pub = await nodes.ssh_key()
        want = {droplet_name(tag, r): r for r in range(req.num_nodes)}
        try:
            fp = await api.ensure_key(pub)
            have = {str(d["name"]): d for d in await api.droplets(tag)}
            stale = [d for n, d in have.items() if n not in want or d.get("status") not in ("new", "active")]
            if stale:
                await gather([(self._delete, api, str(d["id"])) for d in stale])
            todo = [n for n in want if n not in have or have[n] in stale]
            self._sent[tag] = True
            image = req.image_id or default_image(off.accelerator)
            tags = [cluster_tag(tag), *label_tags(req.labels)]
            for n in todo:  # one by one: a refusal stops before more droplets are made
                await api.call("POST", "/droplets", body={
                    "name": n, "region": off.region, "size": off.instance_type, "image": image,
                    "ssh_keys": [fp], "tags": [*tags, f"skyd-rank:{want[n]}"], "backups": False,
                    "ipv6": False, "monitoring": False})
            if todo:
                log(f"Created {len(todo)} droplet(s) in {off.region} ({off.instance_type}, image {image})")
            running = await self._wait_active(api, tag, list(want), where)
        except APIError as e:
            raise classify(e, where=where) from None
        hnodes = [self._node(running[n], r, req.num_nodes, key)
                  for n, r in sorted(want.items(), key=lambda x: x[1])]
        await nodes.forget_host_keys([(str(h.ssh["host"]), int(h.ssh["port"])) for h in hnodes
                                      if h.ssh and h.extra.get("name") in todo])
        zipapp = await self._zip()
        await gather([(nodes.deploy, self._ssh, n, req.cluster_name, req.token, zipapp, log)
                      for n in hnodes])
        return ClusterHandle(
            cluster_name=req.cluster_name, cloud=self.flavor.name, region=off.region, zone=None,
            instance_type=off.instance_type, use_spot=False,
            accelerators={off.accelerator: off.accelerator_count} if off.accelerator else {},
            num_nodes=req.num_nodes, hourly_cost=(off.hourly(False) or 0.0) * req.num_nodes,
            nodes=hnodes, token=req.token, cpus=off.vcpus, memory_gib=off.memory_gib, tag=tag,
            extra={"ports": list(req.ports), "image": image},
        )

    async def _zip(self) -> tuple[Path, str]:
        if self._zipapp is None:
            self._zipapp = await agent_zipapp()
        return self._zipapp

    def _node(self, d: dict[str, Any], rank: int, n: int, key: Path) -> NodeHandle:
        internal, external = addresses(d)
        node = nodes.node_handle(rank, str(d["id"]), internal, external or internal, num_nodes=n,
                                 cluster="", user=SSH_USER, port=config.ssh_port(), key=key,
                                 external=external)
        node.extra["name"] = str(d.get("name") or "")
        return node

    async def _wait_active(self, api: DOAPI, tag: str, names: list[str], where: str) -> dict[str, dict[str, Any]]:
        while True:
            have = {str(d["name"]): d for d in await api.droplets(tag)}
            missing = [n for n in names if n not in have]
            if missing:
                raise ResourcesUnavailableError(f"{where}: droplet {missing[0]} vanished while starting",
                                                scope="region")
            if all(have[n].get("status") == "active" and addresses(have[n])[1] for n in names):
                return have
            await anyio.sleep(config.poll_s())

    async def _delete(self, api: DOAPI, droplet_id: str) -> None:
        try:
            await api.call("DELETE", f"/droplets/{droplet_id}")
        except APIError as e:
            if e.status != 404:
                raise

    async def query(self, handle: ClusterHandle) -> list[str]:
        api = await self.api()
        have = {str(d["id"]): d for d in await api.droplets(handle.cluster_tag)}
        out = []
        for n in handle.nodes:
            d = have.get(n.instance_id)
            out.append(NODE_TERMINATED if d is None else STATUSES.get(str(d.get("status")), NODE_UNKNOWN))
        return out

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        raise SkydError(f"stopping is not supported on {self.flavor.name}: a powered-off GPU "
                        "droplet is still billed", hint=f"use `skyd down {handle.cluster_name}`")

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        raise SkydError(f"starting a stopped cluster is not supported on {self.flavor.name}")

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        return await self._ssh.ensure_agents(handle, log)

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        await nodes.drop_transports(self._ssh, handle.nodes)
        n = await self._remove(handle.cluster_tag, [x.instance_id for x in handle.nodes])
        log(f"Deleted {n} droplet(s) of {handle.cluster_name!r}")

    async def forget(self, partial: PartialHandle) -> None:
        try:
            await self._remove(partial.tag, [])
        except CredentialsError:
            if self._sent.get(partial.tag) is False:  # refused before anything was made
                return
            raise

    async def _remove(self, tag: str, ids: list[str]) -> int:
        """Delete every droplet tagged for the cluster (and ``ids``). Idempotent."""
        api = await self.api()
        todo = set(ids) | {str(d["id"]) for d in await api.droplets(tag)}
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
