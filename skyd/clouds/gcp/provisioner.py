"""GCPProvisioner: Compute Engine instances for a cluster, found by label, with node agents
deployed over SSH (see docs/gcp.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from skyd import settings as knobs
from skyd.clouds.base import (
    NODE_STOPPED,
    ClusterHandle,
    LogFn,
    NodeHandle,
    PartialHandle,
    Provisioner,
    ProvisionRequest,
)
from skyd.clouds.gcp import config, instances, oslogin
from skyd.clouds.gcp.api import ComputeAPI, GCEError
from skyd.clouds.gcp.classify import classify
from skyd.clouds.ssh.provisioner import SSHProvisioner
from skyd.clouds.vm import nodes
from skyd.errors import CredentialsError, ResourcesUnavailableError
from skyd.transports.agent_deploy import agent_zipapp, gather

NAME = "gcp"
PREEMPTED_OP = "compute.instances.preempted"


def _poll_s() -> float:
    return knobs.GCP_POLL_S.get()


class GCPProvisioner(Provisioner):
    def __init__(self) -> None:
        self._api: ComputeAPI | None = None
        self._conf: dict[str, Any] = {}
        self._ssh = SSHProvisioner()
        self._zipapp: tuple[Path, str] | None = None
        # tag -> whether this process sent a create for it: an attempt refused before any
        # create (e.g. its token) has nothing to clean even when the API refuses us again.
        self._sent: dict[str, bool] = {}
        self._oslogin_user: str | None = None  # the OS Login POSIX user, once imported

    # -- the API -----------------------------------------------------------------------

    async def api(self) -> ComputeAPI:
        """The project's API client (credentials and project read once, in a thread)."""
        if self._api is None:
            def load() -> tuple[config.Credentials | None, dict[str, Any], str | None]:
                creds = config.find_credentials()
                conf = config.settings()
                return creds, conf, config.project_id(creds, conf)

            creds, conf, project = await anyio.to_thread.run_sync(load)
            if creds is None:
                raise CredentialsError("no GCP credentials found", hint=config.LOGIN_HINT)
            if not project:
                raise CredentialsError(
                    f"no GCP project: the credentials in {creds.path} name none",
                    hint="set GOOGLE_CLOUD_PROJECT, or gcp.project_id in skyd's config.yaml")
            self._conf, self._api = conf, ComputeAPI(creds, project)
        return self._api

    async def _list(self, api: ComputeAPI, zone: str, tag: str) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        token: str | None = None
        while True:
            params = {"filter": instances.label_filter(tag)}
            if token:
                params["pageToken"] = token
            page = await api.call("GET", f"zones/{zone}/instances", params=params)
            for i in page.get("items") or []:
                out[str(i["name"])] = i
            token = page.get("nextPageToken")
            if not token:
                return out

    async def _op(self, api: ComputeAPI, method: str, path: str, body: dict[str, Any] | None = None,
                  ok: tuple[int, ...] = ()) -> None:
        """One mutating call and its operation; HTTP statuses in ``ok`` count as done
        (404 on delete, 409 on a create that already happened)."""
        try:
            op = await api.call(method, path, body=body)
            await api.wait(op)
        except GCEError as e:
            if e.status in ok:
                return
            raise

    # -- provision ---------------------------------------------------------------------

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        off, tag = req.offering, req.cluster_tag
        self._sent.setdefault(tag, False)
        api = await self.api()
        zone = off.zone
        if not zone:
            raise ResourcesUnavailableError(f"gcp/{off.region}: no zone chosen", scope="region")
        where = f"gcp/{off.region}/{zone}"
        key, pub = await nodes.ssh_key()
        from skyd import config as skyconfig

        self._conf = skyconfig.section("gcp")  # this request's config (SkyPilot's keys too)
        if self._conf.get("labels"):
            import dataclasses

            req = dataclasses.replace(req, labels=tuple(
                {**self._conf["labels"], **dict(req.labels)}.items()))
        user = str(self._conf.get("ssh_user") or "skyd")
        network = str(self._conf.get("vpc_name") or self._conf.get("network") or "default")
        want = {instances.instance_name(tag, r): r for r in range(req.num_nodes)}
        try:
            user = await self._login_user(api, user, pub, log)
            have = await self._list(api, zone, tag)
            stale = [n for n, i in have.items()
                     if n not in want or i.get("status") not in ("PROVISIONING", "STAGING", "RUNNING")]
            if stale:  # found again but not usable (another shape, stopped, preempted)
                await gather([(self._op, api, "DELETE", f"zones/{zone}/instances/{n}") for n in stale])
            self._sent[tag] = True
            await self._ensure_firewall(api, tag, list(req.ports), network)
            todo = [n for n in want if n not in have or n in stale]
            bodies = [instances.instance_body(req, want[n], zone, ssh_user=user, public_key=pub,
                                              network=network) for n in todo]
            await gather([(self._op, api, "POST", f"zones/{zone}/instances", b, (409,)) for b in bodies])
            if todo:
                log(f"Created {len(todo)} instance(s) in {zone} ({off.instance_type}"
                    + (f", {off.accelerator}:{off.accelerator_count:g}" if off.accelerator else "")
                    + (", spot" if req.use_spot else "") + ")")
            running = await self._wait_running(api, zone, tag, list(want), where)
        except GCEError as e:
            raise classify(e, where=where) from None
        hnodes = [self._node(running[n], r, req.num_nodes, req.cluster_name, user, key)
                  for n, r in sorted(want.items(), key=lambda x: x[1])]
        await nodes.forget_host_keys([(str(h.ssh["host"]), int(h.ssh["port"])) for h in hnodes
                                      if h.ssh and h.instance_id in todo])  # new VMs, new keys
        zipapp = await self._zip()
        await gather([(nodes.deploy, self._ssh, n, req.cluster_name, req.token, zipapp, log, None, req.container)
                      for n in hnodes])
        return ClusterHandle(
            cluster_name=req.cluster_name, cloud=NAME, region=off.region, zone=zone,
            instance_type=off.instance_type, use_spot=req.use_spot,
            accelerators={off.accelerator: off.accelerator_count} if off.accelerator else {},
            num_nodes=req.num_nodes, hourly_cost=(off.hourly(req.use_spot) or 0.0) * req.num_nodes,
            nodes=hnodes, token=req.token, cpus=off.vcpus, memory_gib=off.memory_gib, tag=tag,
            extra={"ports": list(req.ports), "project": api.project, "network": network,
                   "image": instances.image_for(req)},
        )

    async def _login_user(self, api: ComputeAPI, user: str, pub: str, log: LogFn) -> str:
        """The SSH user: ``user`` (its key in the VM's ``ssh-keys`` metadata), or, in a
        project with OS Login, the profile's POSIX user after importing the key there."""
        if self._oslogin_user is None:
            project = await api.call("GET", "")
            if not oslogin.enabled(project):
                self._oslogin_user = ""
            else:
                self._oslogin_user = await oslogin.import_key(api, self._conf, pub)
                log(f"OS Login is enabled in project {api.project}: skyd's key was added to "
                    f"the login profile, SSH user {self._oslogin_user}")
        return self._oslogin_user or user

    async def _zip(self) -> tuple[Path, str]:
        if self._zipapp is None:
            self._zipapp = await agent_zipapp()
        return self._zipapp

    def _node(self, inst: dict[str, Any], rank: int, n: int, cluster: str, user: str,
              key: Path) -> NodeHandle:
        internal, external = instances.addresses(inst)
        connect = internal if self._conf.get("use_internal_ips") or not external else external
        node = nodes.node_handle(rank, str(inst["name"]), internal, connect, num_nodes=n,
                                 cluster=cluster, user=user, port=config.ssh_port(self._conf),
                                 key=key, external=external)
        node.extra["gce_id"] = str(inst.get("id") or "")
        return node

    async def _wait_running(self, api: ComputeAPI, zone: str, tag: str, names: list[str],
                            where: str) -> dict[str, dict[str, Any]]:
        """Poll until every named instance is RUNNING (the pipeline's deadline bounds it)."""
        while True:
            have = await self._list(api, zone, tag)
            missing = [n for n in names if n not in have]
            if missing:
                raise ResourcesUnavailableError(
                    f"{where}: instance {missing[0]} vanished while starting (preempted or deleted)",
                    scope="zone")
            gone = [n for n in names if have[n].get("status") in ("TERMINATED", "STOPPING", "SUSPENDED")]
            if gone:
                raise ResourcesUnavailableError(
                    f"{where}: instance {gone[0]} stopped while starting (spot preemption)",
                    scope="zone", provider_message=f"status {have[gone[0]].get('status')}")
            if all(have[n].get("status") == "RUNNING" and instances.addresses(have[n])[0] for n in names):
                return have
            await anyio.sleep(_poll_s())

    async def _ensure_firewall(self, api: ComputeAPI, tag: str, ports: list[str], network: str) -> None:
        body = instances.firewall_body(tag, ports, network)
        try:
            cur = await api.call("GET", f"global/firewalls/{body['name']}")
        except GCEError as e:
            if e.status != 404:
                raise
            await self._op(api, "POST", "global/firewalls", body=body, ok=(409,))
            return
        have = {p for a in cur.get("allowed") or [] for p in a.get("ports") or []}
        if not set(body["allowed"][0]["ports"]) <= have:
            body["allowed"][0]["ports"] = sorted(have | set(body["allowed"][0]["ports"]),
                                                 key=instances._port_key)
            await self._op(api, "PATCH", f"global/firewalls/{body['name']}", body=body)

    # -- lifecycle ---------------------------------------------------------------------

    async def query(self, handle: ClusterHandle) -> list[str]:
        api = await self.api()
        zone = str(handle.zone)
        have = await self._list(api, zone, handle.cluster_tag)
        out = []
        for n in handle.nodes:
            inst = have.get(n.instance_id)
            pre = bool(inst is None and handle.use_spot and n.extra.get("gce_id")
                       and await self._preempted(api, zone, str(n.extra["gce_id"])))
            out.append(instances.node_state(inst, pre))
        if not have:  # every VM is gone (preempted, deleted outside skyd): so is the rule's use
            await self._op(api, "DELETE", f"global/firewalls/{instances.firewall_name(handle.cluster_tag)}",
                           ok=(404,))
        return out

    async def _preempted(self, api: ComputeAPI, zone: str, gce_id: str) -> bool:
        flt = f'(operationType = "{PREEMPTED_OP}") AND (targetId = "{gce_id}")'
        ops = await api.call("GET", f"zones/{zone}/operations", params={"filter": flt})
        return bool(ops.get("items"))

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        api = await self.api()
        await nodes.shutdown_agents(self._ssh, handle.nodes, handle.cluster_name, handle.token)
        await nodes.drop_transports(self._ssh, handle.nodes)
        await gather([(self._op, api, "POST", f"zones/{handle.zone}/instances/{n.instance_id}/stop")
                      for n in handle.nodes])
        log(f"Stopped {len(handle.nodes)} instance(s) in {handle.zone}")

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        api = await self.api()
        zone = str(handle.zone)
        where = f"gcp/{handle.region}/{zone}"
        names = [n.instance_id for n in handle.nodes]
        try:
            await gather([(self._op, api, "POST", f"zones/{zone}/instances/{n}/start") for n in names])
            running = await self._wait_running(api, zone, handle.cluster_tag, names, where)
        except GCEError as e:
            raise classify(e, where=where) from None
        await nodes.drop_transports(self._ssh, handle.nodes)  # ephemeral IPs may have changed
        key, _ = await nodes.ssh_key()
        user = str((handle.nodes[0].ssh or {}).get("user") or "skyd")
        ctrs = {n.rank: n.extra.get("container") for n in handle.nodes}  # image_id docker:
        handle.nodes = [self._node(running[n.instance_id], n.rank, len(handle.nodes),
                                   handle.cluster_name, user, key) for n in handle.nodes]
        nodes.keep_containers(handle.nodes, ctrs)
        zipapp = await self._zip()
        await gather([(nodes.deploy, self._ssh, n, handle.cluster_name, handle.token, zipapp, log)
                      for n in handle.nodes])
        return handle

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        return await self._ssh.ensure_agents(handle, log)

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        await nodes.drop_transports(self._ssh, handle.nodes)
        n = await self._remove(handle.zone, handle.cluster_tag, [x.instance_id for x in handle.nodes])
        log(f"Deleted {n} instance(s) and the firewall rule of {handle.cluster_name!r}")

    async def forget(self, partial: PartialHandle) -> None:
        try:
            await self._remove(partial.zone, partial.tag, [])
        except CredentialsError:
            if self._sent.get(partial.tag) is False:  # refused before anything was made
                return
            raise

    async def _remove(self, zone: str | None, tag: str, names: list[str]) -> int:
        """Delete every instance labelled with ``tag`` in ``zone`` (and ``names``), then the
        cluster's firewall rule. Idempotent."""
        api = await self.api()
        todo = set(names)
        if zone:
            todo |= set(await self._list(api, zone, tag))
            await gather([(self._op, api, "DELETE", f"zones/{zone}/instances/{n}", None, (404,))
                          for n in sorted(todo)])
        await self._op(api, "DELETE", f"global/firewalls/{instances.firewall_name(tag)}", ok=(404,))
        return len(todo)

    async def open_ports(self, handle: ClusterHandle, ports: Sequence[str]) -> None:
        api = await self.api()
        await self._ensure_firewall(api, handle.cluster_tag, list(ports),
                                    str(handle.extra.get("network") or "default"))

    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        return await self._ssh.agent_endpoint(handle, rank)

    async def sync_dir(self, handle: ClusterHandle, rank: int, src: str, dst: str,
                       excludes: list[str]) -> tuple[int, int]:
        return await self._ssh.sync_dir(handle, rank, src, dst, excludes)

    async def close(self) -> None:
        await self._ssh.close()
        if self._api is not None:
            await self._api.close()


__all__ = ["NODE_STOPPED", "GCPProvisioner"]
