"""A provisioner base for providers whose nodes are one VM (or pod, or bare-metal server)
each, made by a REST/GraphQL call and reached over SSH afterwards.

A subclass says how to list the cluster's machines (by name: every machine is named
``vm_name(tag, rank)``, so the tag finds them without any id the daemon may never have
received), create one, delete one, and optionally stop/start one; this base does the rest
the same way for every such provider: find again what exists, delete stale machines, create
the missing ones, poll until each runs with an address, forget the old host keys of new
addresses, deploy the node agent over SSH (skyd.clouds.vm.nodes), confirm the GPUs the agent
detected, and tear down by tag.
"""

from __future__ import annotations

import hashlib
import re
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from skyd import settings as knobs
from skyd.clouds import gpucheck
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
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.ssh.provisioner import SSHProvisioner
from skyd.clouds.vm import nodes
from skyd.errors import (
    ClusterStateError,
    CredentialsError,
    FailoverScope,
    ResourcesUnavailableError,
    SkydError,
)
from skyd.transports.agent_deploy import agent_zipapp, gather

PENDING, RUNNING, STOPPED, FAILED = "pending", "running", "stopped", "failed"


@dataclass
class VM:
    """One machine as the provider lists it, in this base's words."""

    id: str
    name: str
    state: str  # pending | running | stopped | failed
    host: str = ""  # where SSH connects (public address)
    port: int = 22
    internal: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


def vm_name(tag: str, rank: int) -> str:
    """``skyd-<tag>-<rank>``, lower case [a-z0-9-], at most 60 characters."""
    base = re.sub(r"[^a-z0-9-]+", "-", tag.lower()).strip("-") or "c"
    if len(base) > 44 or base != tag:
        base = base[:36].rstrip("-") + "-" + hashlib.sha256(tag.encode()).hexdigest()[:7]
    return f"skyd-{base}-{rank}"


def tag_prefix(tag: str) -> str:
    return vm_name(tag, 0)[:-1]


def of_tag(name: str, tag: str) -> bool:
    p = tag_prefix(tag)
    return name.startswith(p) and name[len(p):].isdigit()


class VMProvisioner(Provisioner):
    NAME = ""
    ssh_user = "root"
    poll_env = ""  # $SKYD_<NAME>_POLL_S
    api_errors: tuple[type[Exception], ...] = (APIError,)  # what `classify` turns into failover
    name_key = "vm_name"  # the NodeHandle.extra key that holds a machine's name
    serial_create = False  # create one by one: a refusal stops before more are made
    vanish_scope: FailoverScope = "zone"  # the failover scope of a machine that vanished while starting

    def __init__(self) -> None:
        self._ssh = SSHProvisioner()
        self._zipapp: tuple[Path, str] | None = None
        self._sent: dict[str, bool] = {}

    # -- what a provider implements ------------------------------------------------------

    @abstractmethod
    async def list_vms(self, tag: str, region: str | None) -> list[VM]:
        """The machines named for ``tag`` (see `of_tag`)."""

    @abstractmethod
    async def create_vm(self, req: ProvisionRequest, rank: int, name: str, public_key: str) -> None:
        """Create one machine; raise APIError (or a SkydError) when refused."""

    @abstractmethod
    async def delete_vm(self, vm: VM) -> None:
        """Delete one machine; already gone is fine."""

    async def stop_vm(self, vm: VM) -> None:
        raise ClusterStateError(f"{self.NAME} machines cannot be stopped; use `skyd down`")

    async def start_vm(self, vm: VM) -> None:
        raise ClusterStateError(f"{self.NAME} machines cannot be started again; launch anew")

    @abstractmethod
    def classify(self, e: Any, where: str, has_zone: bool) -> SkydError:
        """The error to raise for a refused create (``e`` is one of `api_errors`)."""

    def machine_name(self, tag: str, rank: int) -> str:
        return vm_name(tag, rank)

    def created_line(self, req: ProvisionRequest, n: int, where: str) -> str:
        off = req.offering
        return (f"Created {n} machine(s) in {where} ({off.instance_type}"
                + (f", {off.accelerator}:{off.accelerator_count:g}" if off.accelerator else "")
                + (", spot" if req.use_spot else "") + ")")

    def ssh_port(self, vm: VM) -> int:
        return vm.port

    async def prepare(self, req: ProvisionRequest, kept: dict[str, VM], todo: list[str],
                      where: str) -> str:
        """Before the creates of ``todo`` (``kept``: the usable machines found again): check
        capacity or quota, pick a location; returns ``where`` for the messages."""
        return where

    def ready_marker(self, req: ProvisionRequest) -> str | None:
        """A file the node's first-boot setup (user data installing a driver) writes when it
        is done; the agent is deployed only once it exists. None: nothing to wait for."""
        return None

    def handle_region(self, req: ProvisionRequest) -> str | None:
        return req.offering.region

    def handle_extra(self, req: ProvisionRequest) -> dict[str, Any]:
        return {}

    def hourly_cost(self, req: ProvisionRequest) -> float:
        return (req.offering.hourly(req.use_spot) or 0.0) * req.num_nodes

    # -- the flow ----------------------------------------------------------------------

    def _poll_s(self) -> float:
        return float(knobs.knob(self.poll_env).get() or 3.0) if self.poll_env else 3.0  # type: ignore[arg-type]

    @staticmethod
    def where(req: ProvisionRequest) -> str:
        o = req.offering
        return "/".join(p for p in (o.cloud, o.region, o.zone) if p)

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        off, tag = req.offering, req.cluster_tag
        self._sent.setdefault(tag, False)
        where = self.where(req)
        key, pub = await nodes.ssh_key()
        want = {self.machine_name(tag, r): r for r in range(req.num_nodes)}
        try:
            have = {v.name: v for v in await self.list_vms(tag, off.region)}
            stale = [v for n, v in have.items() if n not in want or v.state in (FAILED, STOPPED)]
            if stale:  # found again but unusable (another size, stopped, failed)
                await gather([(self.delete_vm, v) for v in stale])
            todo = [n for n in want if n not in have or have[n] in stale]
            if todo:
                where = await self.prepare(req, {n: v for n, v in have.items() if v not in stale},
                                           todo, where)
            self._sent[tag] = True
            if self.serial_create:
                for n in todo:
                    await self.create_vm(req, want[n], n, pub)
            else:
                await gather([(self.create_vm, req, want[n], n, pub) for n in todo])
            if todo:
                log(self.created_line(req, len(todo), where))
            running = await self._wait_running(tag, off.region, list(want), where)
        except self.api_errors as e:
            raise self.classify(e, where, bool(off.zone)) from None
        hnodes = [self._node(running[n], r, req.num_nodes) for n, r in sorted(want.items(), key=lambda x: x[1])]
        for h in hnodes:
            h.ssh["identity_file"] = str(key)  # type: ignore[index]
        await nodes.forget_host_keys([(str(h.ssh["host"]), int(h.ssh["port"])) for h in hnodes
                                      if h.ssh and h.extra.get(self.name_key) in todo])
        zipapp = await self._zip()
        marker = self.ready_marker(req)
        await gather([(nodes.deploy, self._ssh, n, req.cluster_name, req.token, zipapp, log, marker,
                       req.container)
                      for n in hnodes])
        handle = ClusterHandle(
            cluster_name=req.cluster_name, cloud=self.NAME, region=self.handle_region(req), zone=off.zone,
            instance_type=off.instance_type, use_spot=req.use_spot,
            accelerators={off.accelerator: off.accelerator_count} if off.accelerator else {},
            num_nodes=req.num_nodes, hourly_cost=self.hourly_cost(req), nodes=hnodes,
            token=req.token, cpus=off.vcpus, memory_gib=off.memory_gib, tag=tag,
            extra={"ports": list(req.ports)} | self.handle_extra(req))
        await gpucheck.confirm(self, handle, image=req.image_id, user_image=bool(req.image_id))
        log(f"GPUs confirmed by the node agents: {off.accelerator}:{off.accelerator_count:g} per node"
            if off.accelerator else "Nodes ready")
        return handle

    async def _zip(self) -> tuple[Path, str]:
        if self._zipapp is None:
            self._zipapp = await agent_zipapp()
        return self._zipapp

    def _node(self, vm: VM, rank: int, n: int) -> NodeHandle:
        node = nodes.node_handle(rank, vm.id, vm.internal or vm.host, vm.host, num_nodes=n,
                                 cluster="", user=self.ssh_user, port=self.ssh_port(vm),
                                 key=Path(""), external=vm.host)
        node.extra[self.name_key] = vm.name
        return node

    async def _wait_running(self, tag: str, region: str | None, names: list[str],
                            where: str) -> dict[str, VM]:
        """Poll until every named machine runs with an address (the attempt's deadline
        bounds it)."""
        while True:
            have = {v.name: v for v in await self.list_vms(tag, region)}
            missing = [n for n in names if n not in have]
            if missing:
                raise ResourcesUnavailableError(
                    f"{where}: machine {missing[0]} vanished while starting", scope=self.vanish_scope)
            failed = [n for n in names if have[n].state == FAILED]
            if failed:
                raise ResourcesUnavailableError(
                    f"{where}: machine {failed[0]} failed to start", scope=self.vanish_scope,
                    provider_message=str(have[failed[0]].raw.get("status") or "failed"))
            if all(have[n].state == RUNNING and have[n].host for n in names):
                return have
            await anyio.sleep(self._poll_s())

    # -- lifecycle ---------------------------------------------------------------------

    async def query(self, handle: ClusterHandle) -> list[str]:
        have = {v.name: v for v in await self.list_vms(handle.cluster_tag, handle.region)}
        out = []
        for n in handle.nodes:
            v = have.get(str(n.extra.get(self.name_key)))
            out.append(NODE_TERMINATED if v is None else {
                RUNNING: NODE_RUNNING, PENDING: NODE_PENDING, STOPPED: NODE_STOPPED,
                FAILED: NODE_TERMINATED}.get(v.state, NODE_UNKNOWN))
        return out

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        have = {v.name: v for v in await self.list_vms(handle.cluster_tag, handle.region)}
        vms = [have[str(n.extra.get(self.name_key))] for n in handle.nodes if n.extra.get(self.name_key) in have]
        if type(self).stop_vm is VMProvisioner.stop_vm:  # refuse before touching the agents
            await self.stop_vm(VM("", "", STOPPED))
        await nodes.shutdown_agents(self._ssh, handle.nodes, handle.cluster_name, handle.token)
        await nodes.drop_transports(self._ssh, handle.nodes)
        await gather([(self.stop_vm, v) for v in vms])
        log(f"Stopped {len(vms)} machine(s) of {handle.cluster_name!r}")

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        where = "/".join(p for p in (self.NAME, handle.region, handle.zone) if p)
        have = {v.name: v for v in await self.list_vms(handle.cluster_tag, handle.region)}
        names = [str(n.extra.get(self.name_key)) for n in handle.nodes]
        try:
            await gather([(self.start_vm, have[n]) for n in names if n in have and have[n].state == STOPPED])
            running = await self._wait_running(handle.cluster_tag, handle.region, names, where)
        except self.api_errors as e:
            raise self.classify(e, where, bool(handle.zone)) from None
        await nodes.drop_transports(self._ssh, handle.nodes)  # addresses and ports may change
        key, _ = await nodes.ssh_key()
        ctrs = {n.rank: n.extra.get("container") for n in handle.nodes}  # image_id docker:
        handle.nodes = [self._node(running[str(n.extra.get(self.name_key))], n.rank, len(handle.nodes))
                        for n in handle.nodes]
        nodes.keep_containers(handle.nodes, ctrs)
        for h in handle.nodes:
            h.ssh["identity_file"] = str(key)  # type: ignore[index]
        zipapp = await self._zip()
        await gather([(nodes.deploy, self._ssh, n, handle.cluster_name, handle.token, zipapp, log)
                      for n in handle.nodes])
        return handle

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        return await self._ssh.ensure_agents(handle, log)

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        await nodes.drop_transports(self._ssh, handle.nodes)
        n = await self._remove(handle.cluster_tag, handle.region)
        log(f"Deleted {n} machine(s) of {handle.cluster_name!r}")

    async def forget(self, partial: PartialHandle) -> None:
        try:
            await self._remove(partial.tag, partial.region)
        except CredentialsError:
            if self._sent.get(partial.tag) is False:  # refused before anything was made
                return
            raise

    async def _remove(self, tag: str, region: str | None) -> int:
        """Delete every machine named for ``tag``, and wait until the listing says so."""
        vms = await self.list_vms(tag, region)
        await gather([(self.delete_vm, v) for v in vms])
        with anyio.move_on_after(120):
            while await self.list_vms(tag, region):
                await anyio.sleep(self._poll_s())
        return len(vms)

    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        return await self._ssh.agent_endpoint(handle, rank)

    async def sync_dir(self, handle: ClusterHandle, rank: int, src: str, dst: str,
                       excludes: list[str]) -> tuple[int, int]:
        return await self._ssh.sync_dir(handle, rank, src, dst, excludes)

    async def close(self) -> None:
        await self._ssh.close()


__all__ = ["FAILED", "PENDING", "RUNNING", "STOPPED", "VM", "VMProvisioner", "of_tag", "vm_name"]
