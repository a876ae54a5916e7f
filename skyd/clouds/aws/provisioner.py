"""AWSProvisioner: clusters of EC2 instances, their agents deployed over SSH.

One attempt (docs/aws.md, "Provisioning"): check the instance type is offered in the zone
and the image fits its architecture; make the cluster's key pair, security group (and
placement group when asked) idempotently; RunInstances for every node at once in the
zone's default subnet (on-demand, or spot through InstanceMarketOptions); tag each instance
with the cluster tag, name and rank; wait until they run; deploy and start the node agent
over SSH (skyd.transports.agent_deploy). Instances already carrying the cluster's tag are
found again, not made twice. Every EC2 error is classified into a failover scope
(skyd.clouds.aws.errors); whatever an attempt made is removed by ``forget`` (by tag).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from skyd import settings as knobs
from skyd.clouds.aws import images, instances, network
from skyd.clouds.aws.errors import classify
from skyd.clouds.aws.session import Clients, is_loopback, loopback_only
from skyd.clouds.base import (
    NODE_UNKNOWN,
    ClusterHandle,
    LogFn,
    NodeHandle,
    PartialHandle,
    Provisioner,
    ProvisionRequest,
)
from skyd.clouds.vm import nodes
from skyd.errors import ClusterStateError, ResourcesUnavailableError, SkydError
from skyd.transports import agent_deploy, container
from skyd.transports.agent_deploy import AgentSite, agent_zipapp
from skyd.transports.ssh import SSHConnectError, SSHTarget, SSHTransport

NAME = "aws"
DEFAULT_DISK_GB = 256
SSH_BOOT_S = 300.0  # how long a new instance may take to accept SSH


def ssh_port() -> int:
    return knobs.AWS_SSH_PORT.get()


def _is_botocore(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(("botocore", "aiobotocore"))


def _config() -> dict[str, Any]:
    """The ``aws:`` section of $SKYD_CONFIG_DIR/config.yaml (placement_group: true)."""
    from skyd.clouds.settings import section

    return section("aws")


def _per_cluster(value: Any, cluster: str) -> str | None:
    """A SkyPilot value that is a string, or a list of {cluster-glob: value} (first match)."""
    import fnmatch

    if isinstance(value, str):
        return value
    for item in value or []:
        for pattern, v in (item or {}).items():
            if fnmatch.fnmatch(cluster, str(pattern)):
                return str(v)
    return None


def _sg_name(conf: dict[str, Any], cluster: str) -> str | None:
    return _per_cluster(conf.get("security_group_name"), cluster)


def _iam_profile(conf: dict[str, Any], cluster: str) -> str | None:
    """``aws.remote_identity``: an instance profile name is attached to the nodes;
    LOCAL_CREDENTIALS / SERVICE_ACCOUNT / NO_UPLOAD attach none (skyd never copies the
    workstation's credentials to nodes)."""
    v = _per_cluster(conf.get("remote_identity"), cluster)
    if not v or v.upper() in ("LOCAL_CREDENTIALS", "SERVICE_ACCOUNT", "NO_UPLOAD"):
        return None
    return v


class AWSProvisioner(Provisioner):
    def __init__(self, clients: Clients | None = None, *, zipapp: tuple[Path, str] | None = None) -> None:
        self.clients = clients or Clients()
        self._zipapp = zipapp
        self._transports: dict[str, SSHTransport] = {}
        self._zones: dict[str, dict[str, str]] = {}  # region -> zone id/name -> zone name
        self._arch: dict[tuple[str, str], str] = {}
        self._offered: dict[tuple[str, str], set[str]] = {}  # (region, type) -> zones
        self._subnets: dict[str, tuple[str, str]] = {}  # zone -> (vpc, default subnet)
        self.deploy_agents = True  # bench/aws_bench.py measures the EC2 part alone

    async def ec2(self, region: str) -> Any:
        return await self.clients.client("ec2", region)

    # -- helpers ------------------------------------------------------------------------

    async def _zone(self, ec2: Any, region: str, zone: str | None) -> str:
        zones = self._zones.get(region)
        if zones is None:
            out = await ec2.describe_availability_zones(
                Filters=[{"Name": "state", "Values": ["available"]}])
            zones = {}
            for z in out.get("AvailabilityZones") or []:
                zones[str(z["ZoneName"])] = str(z["ZoneName"])
                if z.get("ZoneId"):
                    zones[str(z["ZoneId"])] = str(z["ZoneName"])
            self._zones[region] = zones
        if zone is None:
            return sorted(set(zones.values()))[0]
        if zone not in zones:
            raise ResourcesUnavailableError(f"aws/{region}: zone {zone!r} is not available to this account",
                                            scope="zone")
        return zones[zone]

    async def _architecture(self, ec2: Any, region: str, itype: str) -> str:
        key = (region, itype)
        if key not in self._arch:
            from botocore.exceptions import ClientError

            try:
                out = await ec2.describe_instance_types(InstanceTypes=[itype])
            except ClientError as e:
                from skyd.clouds.aws.errors import is_code

                if not is_code(e, "InvalidInstanceType"):
                    raise
                out = {}
            types = out.get("InstanceTypes") or []
            if not types:
                raise ResourcesUnavailableError(
                    f"aws/{region}: instance type {itype!r} is not offered in this region",
                    scope="region", provider_message="InvalidInstanceType",
                    hint="pick another region (skyd show-gpus shows where it is offered) or type")
            archs = (types[0].get("ProcessorInfo") or {}).get("SupportedArchitectures") or ["x86_64"]
            self._arch[key] = "arm64" if "arm64" in archs and "x86_64" not in archs else "x86_64"
        return self._arch[key]

    async def _offered_in(self, ec2: Any, region: str, itype: str, zone: str, where: str) -> None:
        key = (region, itype)
        if key not in self._offered:
            out = await ec2.describe_instance_type_offerings(LocationType="availability-zone", Filters=[
                {"Name": "instance-type", "Values": [itype]}])
            self._offered[key] = {str(o["Location"]) for o in out.get("InstanceTypeOfferings") or []}
        if zone not in self._offered[key]:
            raise ResourcesUnavailableError(f"{where}: {itype} is not offered in {zone}", scope="zone",
                                            provider_message="Unsupported")

    async def _zip(self) -> tuple[Path, str]:
        if self._zipapp is None:
            self._zipapp = await agent_zipapp()
        return self._zipapp

    def _transport(self, node: NodeHandle) -> SSHTransport:
        assert node.ssh is not None, "not an ssh node"
        target = SSHTarget.from_dict(node.ssh)
        if loopback_only() and not is_loopback(target.host):
            raise ResourcesUnavailableError(
                f"refusing to connect to {target.host}: SKYD_AWS_LOOPBACK_ONLY allows 127.0.0.0/8 only",
                scope="stop")
        t = self._transports.get(target.key)
        if t is None:
            t = SSHTransport(target, connect_timeout=10.0, connect_attempts=1)
            self._transports[target.key] = t
        return t

    async def _drop_transports(self, nodes: Sequence[NodeHandle]) -> None:
        for n in nodes:
            if n.ssh is None:
                continue
            t = self._transports.pop(SSHTarget.from_dict(n.ssh).key, None)
            if t is not None:
                await t.close()

    # -- provision ----------------------------------------------------------------------

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        off = req.offering
        where = "/".join(p for p in ("aws", off.region, off.zone) if p)
        try:
            return await self._provision(req, log, where)
        except Exception as e:
            if _is_botocore(e):
                raise classify(e, where) from None
            raise

    async def _provision(self, req: ProvisionRequest, log: LogFn, where: str) -> ClusterHandle:
        off, tag, name = req.offering, req.cluster_tag, req.cluster_name
        region = off.region
        ec2 = await self.ec2(region)
        zone = await self._zone(ec2, region, off.zone)
        where = f"aws/{region}/{zone}"
        have = await instances.by_tag(ec2, tag, states=instances.LIVE)
        if have and (len(have) != req.num_nodes
                     or any((i.get("Placement") or {}).get("AvailabilityZone") != zone for i in have)):
            log(f"Removing {len(have)} instance(s) of an earlier, different shape of {name}")
            await instances.terminate_tagged(ec2, tag)
            have = []
        priv, pub = await network.ssh_key()
        if have:
            log(f"Found {len(have)} instance(s) of {name} in {zone} again (tag {tag})")
            stopped = [str(i["InstanceId"]) for i in have if i["State"]["Name"] in ("stopping", "stopped")]
            if stopped:
                await instances.wait_state(ec2, tag, stopped, ("stopped",))
                await ec2.start_instances(InstanceIds=stopped)
            ssh_user = instances.tags_of(have[0]).get(instances.USER_KEY, "ubuntu")
            gid = next((g["GroupId"] for i in have for g in i.get("SecurityGroups") or []), "")
        else:
            arch = await self._architecture(ec2, region, off.instance_type)
            await self._offered_in(ec2, region, off.instance_type, zone, where)
            if req.image_id:
                img = await images.given_image(ec2, region, req.image_id, arch, off.instance_type)
            else:
                img = await images.default_image(ec2, region, off.accelerator, arch, log)
            conf = _config()
            ssh_user = str(conf.get("ssh_user") or images.ssh_user(img))
            key_name = await network.ensure_key_pair(ec2, tag, name, pub)
            vpc_name = conf.get("vpc_name")
            if vpc_name:
                vpc, subnet = await network.named_subnet(ec2, str(vpc_name), zone)
            else:
                if zone not in self._subnets:
                    self._subnets[zone] = await network.default_subnet(ec2, zone)
                vpc, subnet = self._subnets[zone]
            gid = await network.ensure_security_group(ec2, tag, name, vpc, req.ports,
                                                      group_name=_sg_name(conf, name))
            pg = None
            if req.num_nodes > 1 and _config().get("placement_group"):
                pg = await network.ensure_placement_group(ec2, tag, name)
            made = await instances.create(
                ec2, tag=tag, name=name, num=req.num_nodes, instance_type=off.instance_type,
                zone=zone, image=img, key_name=key_name, sg=gid, subnet=subnet, spot=req.use_spot,
                disk_gb=req.disk_size or DEFAULT_DISK_GB, placement_group=pg,
                labels={**(conf.get("labels") or {}), **dict(req.tags())}, ssh_user=ssh_user,
                iam_profile=_iam_profile(conf, name), public_ip=not conf.get("use_internal_ips"))
            have = made
            kind = "spot" if req.use_spot else "on-demand"
            log(f"Created {len(made)} {kind} {off.instance_type} instance(s) in {zone}"
                f" ({img.get('Name') or img['ImageId']})")
        ids = [str(i["InstanceId"]) for i in have]
        # aws.use_internal_ips: no public address is coming; the private one is enough
        insts = await instances.wait_running(ec2, tag, ids, where,
                                             public=not _config().get("use_internal_ips"))
        log(f"{len(insts)} instance(s) running in {zone}")
        nodes = [self._node(name, rank, i, ssh_user, str(priv), len(insts))
                 for rank, i in enumerate(insts)]
        handle = ClusterHandle(
            cluster_name=name, cloud=NAME, region=region, zone=zone,
            instance_type=off.instance_type, use_spot=req.use_spot,
            accelerators={off.accelerator: off.accelerator_count} if off.accelerator else {},
            num_nodes=len(nodes), hourly_cost=(off.hourly(req.use_spot) or 0.0) * len(nodes),
            nodes=nodes, token=req.token, cpus=off.vcpus, memory_gib=off.memory_gib, tag=tag,
            extra={"sg": gid, "ports": list(req.ports), "ssh_user": ssh_user},
        )
        if self.deploy_agents:
            await self._deploy_all(handle, log, where, req.container)
        return handle

    def _node(self, cluster: str, rank: int, inst: dict[str, Any], user: str, key: str, n: int) -> NodeHandle:
        private = str(inst["PrivateIpAddress"])
        public = inst.get("PublicIpAddress")
        host = private if _config().get("use_internal_ips") else str(public or private)
        return NodeHandle(
            rank=rank, instance_id=str(inst["InstanceId"]), internal_ip=private,
            external_ip=str(public) if public else None,
            ssh={"host": host, "port": ssh_port(), "user": user, "identity_file": key, "proxy_jump": None},
            extra={"listen_host": "127.0.0.1" if n == 1 else private},
        )

    async def _deploy_all(self, handle: ClusterHandle, log: LogFn, where: str,
                          container_req: Any = None) -> None:
        zipapp = await self._zip()

        async def one(node: NodeHandle) -> None:
            t = self._transport(node)
            await self._wait_ssh(t, where)
            if not node.extra.get("home"):
                res = await t.run("printf %s \"$HOME\"", check=True, idempotent=True, timeout=30)
                home = res.stdout.strip() or "."
                base = posixpath.join(home, ".skyd")
                node.extra.update(home=home, base=base)
                node.node_dir = posixpath.join(base, "nodes", f"{handle.cluster_name}-{node.rank}")
            site = _site(node, handle.cluster_name)
            # image_id docker:<img>: the agent runs inside the task's container (containers.md)
            at = await container.prepare(t, node.extra, rank=node.rank, node_dir=node.node_dir,
                                         home=str(node.extra.get("home") or ""), log=log,
                                         request=container_req)
            info = await agent_deploy.start(at, site, handle.token, zipapp)
            _record(node, site, info)
            log(f"Node {node.rank} ({node.instance_id}): agent {info.get('state')} on port {node.agent_port}")

        await agent_deploy.gather([(one, n) for n in handle.nodes])

    async def _wait_ssh(self, t: SSHTransport, where: str) -> None:
        """A new instance accepts SSH some seconds after it runs (and the key only once
        cloud-init wrote it): retry until it does, within SSH_BOOT_S."""
        delay = 0.2
        with anyio.move_on_after(SSH_BOOT_S):
            while True:
                try:
                    await t.connection(attempts=1)
                    return
                except SSHConnectError:
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 5.0)
        raise ResourcesUnavailableError(f"{where}: {t} did not accept SSH within {SSH_BOOT_S:.0f}s",
                                        scope="zone")

    # -- lifecycle ----------------------------------------------------------------------

    async def _call(self, fn: Any, *args: Any, where: str) -> Any:
        try:
            return await fn(*args)
        except Exception as e:
            if _is_botocore(e):
                raise classify(e, where) from None
            raise

    async def query(self, handle: ClusterHandle) -> list[str]:
        async def run() -> list[str]:
            ec2 = await self.ec2(str(handle.region))
            insts = await instances.by_tag(ec2, handle.cluster_tag)
            by_id = {str(i["InstanceId"]): i for i in insts}
            return [instances.node_state(by_id.get(n.instance_id)) for n in handle.nodes]

        try:
            out: list[str] = await self._call(run, where=f"aws/{handle.region}")
            return out
        except ResourcesUnavailableError:
            return [NODE_UNKNOWN] * len(handle.nodes)

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        if handle.use_spot:
            raise ClusterStateError(f"cluster {handle.cluster_name!r} runs on spot instances, which cannot be stopped",
                                    hint=f"skyd down {handle.cluster_name}")

        async def run() -> None:
            ec2 = await self.ec2(str(handle.region))
            ids = [n.instance_id for n in handle.nodes]
            await self._drop_transports(handle.nodes)
            await ec2.stop_instances(InstanceIds=ids)
            await instances.wait_state(ec2, handle.cluster_tag, ids, ("stopped",))

        await self._call(run, where=f"aws/{handle.region}")
        log(f"Stopped {len(handle.nodes)} instance(s) of {handle.cluster_name}")

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        where = f"aws/{handle.region}/{handle.zone}"

        async def run() -> None:
            ec2 = await self.ec2(str(handle.region))
            ids = [n.instance_id for n in handle.nodes]
            await instances.wait_state(ec2, handle.cluster_tag, ids, ("stopped", "running"))
            await ec2.start_instances(InstanceIds=ids)
            insts = await instances.wait_running(ec2, handle.cluster_tag, ids, where,
                                                 public=not _config().get("use_internal_ips"))
            by_id = {str(i["InstanceId"]): i for i in insts}
            await self._drop_transports(handle.nodes)
            for n in handle.nodes:  # addresses change across a stop
                i = by_id[n.instance_id]
                n.internal_ip = str(i["PrivateIpAddress"])
                n.external_ip = i.get("PublicIpAddress")
                assert n.ssh is not None
                n.ssh["host"] = str(n.external_ip or n.internal_ip)
                if len(handle.nodes) > 1:
                    n.extra["listen_host"] = n.internal_ip

        await self._call(run, where=where)
        if self.deploy_agents:
            await self._deploy_all(handle, log, where)
        log(f"Started {len(handle.nodes)} instance(s) of {handle.cluster_name}")
        return handle

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        pairs = [(container.wrap(self._transport(n), n.extra), _site(n, handle.cluster_name))
                 for n in handle.nodes]
        await agent_deploy.ensure(pairs, handle.token, await self._zip(), log, cluster=handle.cluster_name)
        for node, (_, site) in zip(handle.nodes, pairs, strict=True):
            _record(node, site, None)
        return handle

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        await self._drop_transports(handle.nodes)
        ids = await self._remove(str(handle.region), handle.cluster_tag)
        await nodes.forget_host_keys([(str(n.ssh["host"]), int(n.ssh.get("port") or 22))
                                      for n in handle.nodes if n.ssh])
        log(f"Terminated {len(ids)} instance(s) of {handle.cluster_name}; removed its security group and key pair")

    async def forget(self, partial: PartialHandle) -> None:
        if partial.region:
            await self._remove(partial.region, partial.tag)

    async def _remove(self, region: str, tag: str) -> list[str]:
        async def run() -> list[str]:
            ec2 = await self.ec2(region)
            insts = await instances.by_tag(ec2, tag)
            pgs = {str((i.get("Placement") or {}).get("GroupName")) for i in insts
                   if (i.get("Placement") or {}).get("GroupName")}
            if _config().get("placement_group"):
                pgs.add(network.object_name(tag))  # made before RunInstances failed
            ids = await instances.terminate_tagged(ec2, tag, insts)
            await network.delete_cluster_objects(ec2, tag, pgs)
            return ids

        out: list[str] = await self._call(run, where=f"aws/{region}")
        return out

    async def open_ports(self, handle: ClusterHandle, ports: Sequence[str]) -> None:
        async def run() -> None:
            ec2 = await self.ec2(str(handle.region))
            gid = str(handle.extra.get("sg") or "")
            if not gid:
                found = await ec2.describe_security_groups(Filters=[
                    {"Name": f"tag:{network.TAG_KEY}", "Values": [handle.cluster_tag]}])
                gid = str(found["SecurityGroups"][0]["GroupId"])
            await network.open_ports(ec2, gid, list(ports))

        await self._call(run, where=f"aws/{handle.region}")
        handle.extra["ports"] = sorted(set(handle.extra.get("ports") or []) | set(ports))

    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        node = handle.nodes[rank]
        return await self._transport(node).agent_endpoint(_site(node, handle.cluster_name).address())

    async def sync_dir(self, handle: ClusterHandle, rank: int, src: str, dst: str,
                       excludes: list[str]) -> tuple[int, int]:
        from skyd.transports.sync import sync_to_remote

        node = handle.nodes[rank]
        home = str(node.extra.get("home") or "")
        if dst == "~" or dst.startswith("~/"):
            remote = posixpath.join(home, dst[2:]) if home else dst
        elif dst.startswith("/"):
            remote = dst
        else:
            remote = posixpath.join(node.node_dir, dst)
        stats = await sync_to_remote(self._transport(node), Path(src), remote, excludes)
        return stats.files, stats.bytes

    async def close(self) -> None:
        for t in list(self._transports.values()):
            try:
                await t.close()
            except (SkydError, OSError):
                pass
        self._transports.clear()
        await self.clients.close()


def _site(node: NodeHandle, cluster: str) -> AgentSite:
    x = node.extra
    return AgentSite(
        node_dir=node.node_dir,
        base=str(x.get("base") or posixpath.dirname(posixpath.dirname(node.node_dir))),
        rank=node.rank, cluster=cluster, listen_host=str(x.get("listen_host") or "127.0.0.1"),
        port=node.agent_port, socket=x.get("agent_socket") or None, sha=str(x.get("sha") or ""),
    )


def _record(node: NodeHandle, site: AgentSite, info: dict[str, Any] | None) -> None:
    node.agent_port = site.port
    if site.sha:
        node.extra["sha"] = site.sha
    if site.socket:
        node.extra["agent_socket"] = site.socket
    if info is not None:
        node.extra["agent_state"] = info.get("state")
