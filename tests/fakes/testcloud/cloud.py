"""The `testcloud` provider: a complete VM-style provider over the fake instances API
(server.py), written the way docs/providers.md tells a newcomer to write one.

Registered with one line: ``SKYD_CLOUD_PLUGINS=testcloud=tests.fakes.testcloud.cloud:TestCloud``
(:data:`tests.fakes.testcloud.PLUGIN`). The API's address comes from ``$SKYD_TESTCLOUD_URL``
and its key from ``$SKYD_TESTCLOUD_KEY``; both the API and every instance address must be
loopback (tests never connect anywhere else).
"""

from __future__ import annotations

import ipaddress
import math
import os
from typing import Any
from urllib.parse import urlparse

import aiohttp
import anyio

from skyd.clouds.base import (
    NODE_PENDING,
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    Cloud,
    ClusterHandle,
    LogFn,
    NodeHandle,
    PartialHandle,
    Provisioner,
    ProvisionRequest,
)
from skyd.clouds.offering import Offering
from skyd.errors import CredentialsError, FailoverScope, ResourcesUnavailableError

NAME = "testcloud"
ZONES = {"r1": ("r1-a", "r1-b"), "r2": ("r2-a", "r2-b"), "r3": ("r3-a", "r3-b")}
POLL_S = 0.1

# The provider's error codes -> failover scope (docs/providers.md, "Errors and scopes").
_SCOPES: dict[int, FailoverScope] = {409: "zone", 403: "region", 503: "cloud", 400: "stop"}
_STATES = {"running": NODE_RUNNING, "stopped": NODE_STOPPED, "pending": NODE_PENDING}


def catalog() -> list[Offering]:
    out = []
    for i, (region, zones) in enumerate(ZONES.items()):
        for j, zone in enumerate(zones):
            price = round(0.01 * (i + 1) + 0.001 * j, 4)
            out.append(Offering(NAME, "tc-small", None, 0, 2, 4, region, zone, price, None))
    return out


def _loopback(host: str | None, what: str) -> str:
    try:
        ok = host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ResourcesUnavailableError(
            f"{what} {host!r} is not a loopback address; testcloud only talks to 127.0.0.0/8",
            scope="stop")
    return str(host)


class TestProvisioner(Provisioner):
    __test__ = False  # not a pytest class

    def __init__(self, cloud_name: str = NAME) -> None:
        self.cloud_name = cloud_name
        self._session: aiohttp.ClientSession | None = None
        self._loop: object = None  # the event loop the session belongs to

    # -- the API ----------------------------------------------------------------------------

    def _base(self) -> str:
        url = os.environ.get("SKYD_TESTCLOUD_URL", "")
        _loopback(urlparse(url).hostname, "SKYD_TESTCLOUD_URL host")
        return url.rstrip("/")

    async def call(self, method: str, path: str, *, params: dict[str, str] | None = None,
                   body: dict[str, Any] | None = None, where: str = "") -> dict[str, Any]:
        """One API call; a refusal becomes CredentialsError or ResourcesUnavailableError with
        the scope its status declares and the API's own code and message."""
        import asyncio

        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop:  # (tests run one loop per test)
            self._session, self._loop = aiohttp.ClientSession(), loop
        headers = {"Authorization": f"Bearer {os.environ.get('SKYD_TESTCLOUD_KEY', '')}"}
        async with self._session.request(method, self._base() + path, params=params, json=body,
                                         headers=headers) as resp:
            data = await resp.json()
        if resp.status < 300:
            return dict(data)
        said = f"{data.get('code')}: {data.get('message')}"
        if resp.status == 401:
            raise CredentialsError(f"{self.cloud_name} refused the API key ({said})",
                                   hint="set SKYD_TESTCLOUD_KEY")
        scope = _SCOPES.get(resp.status, "zone")
        raise ResourcesUnavailableError(f"{self.cloud_name}{where}: {data.get('message')}",
                                        scope=scope, provider_message=said)

    async def _instances(self, tag: str, **where: str | None) -> list[dict[str, Any]]:
        params = {"tag": tag, **{k: v or "" for k, v in where.items()}}
        return list((await self.call("GET", "/v1/instances", params=params))["instances"])

    # -- Provisioner ------------------------------------------------------------------------

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        off, tag = req.offering, req.cluster_tag
        where = f"/{off.region}/{off.zone}"
        have = await self._instances(tag, region=off.region, zone=off.zone)
        if have and len(have) != req.num_nodes:  # a different shape: start over
            await self.call("DELETE", "/v1/instances", params={"tag": tag})
            have = []
        if not have:  # else: found again by tag (idempotent)
            await self.call("POST", "/v1/instances", where=where, body={
                "tag": tag, "cluster": req.cluster_name, "region": off.region, "zone": off.zone,
                "instance_type": off.instance_type, "count": req.num_nodes, "token": req.token,
                "ports": list(req.ports), "disk_size": req.disk_size, "image_id": req.image_id,
                "labels": dict(req.labels) | {"skyd-cluster": tag},
            })
            log(f"Created {req.num_nodes} instance(s) in {off.region}/{off.zone}")
        while True:  # wait: the pipeline's deadline bounds it
            insts = await self._instances(tag, region=off.region, zone=off.zone)
            if len(insts) == req.num_nodes and all(i["state"] == "running" for i in insts):
                break
            await anyio.sleep(POLL_S)
        nodes = [NodeHandle(rank=int(i["rank"]), instance_id=i["id"],
                            internal_ip=_loopback(i["ip"], "instance address"),
                            agent_port=int(i["agent_port"]), node_dir=i["node_dir"])
                 for i in sorted(insts, key=lambda i: int(i["rank"]))]
        return ClusterHandle(
            cluster_name=req.cluster_name, cloud=self.cloud_name, region=off.region,
            zone=off.zone, instance_type=off.instance_type, use_spot=False, accelerators={},
            num_nodes=req.num_nodes, hourly_cost=(off.hourly(False) or 0.0) * req.num_nodes,
            nodes=nodes, token=req.token, cpus=off.vcpus, memory_gib=off.memory_gib, tag=tag,
            extra={"ports": list(req.ports)},
        )

    async def query(self, handle: ClusterHandle) -> list[str]:
        by_id = {i["id"]: i for i in await self._instances(handle.cluster_tag)}
        return [_STATES.get(by_id[n.instance_id]["state"], NODE_PENDING)
                if n.instance_id in by_id else NODE_TERMINATED for n in handle.nodes]

    async def _refresh_ports(self, handle: ClusterHandle, insts: list[dict[str, Any]]) -> ClusterHandle:
        by_id = {i["id"]: i for i in insts}
        for n in handle.nodes:
            if n.instance_id in by_id:
                n.agent_port = int(by_id[n.instance_id]["agent_port"])
        return handle

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        await self.call("POST", "/v1/instances/stop", params={"tag": handle.cluster_tag})

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        out = await self.call("POST", "/v1/instances/start", params={"tag": handle.cluster_tag})
        return await self._refresh_ports(handle, list(out["instances"]))

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        return await self._refresh_ports(handle, await self._instances(handle.cluster_tag))

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        await self.call("DELETE", "/v1/instances", params={"tag": handle.cluster_tag})

    async def forget(self, partial: PartialHandle) -> None:
        await self.call("DELETE", "/v1/instances", params={
            "tag": partial.tag, "region": partial.region or "", "zone": partial.zone or ""})

    async def open_ports(self, handle: ClusterHandle, ports: Any) -> None:
        await self.call("POST", "/v1/instances/ports", params={"tag": handle.cluster_tag},
                        body={"ports": list(ports)})

    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        node = handle.nodes[rank]
        return _loopback(node.internal_ip, "instance address"), node.agent_port

    async def sync_dir(self, handle: ClusterHandle, rank: int, src: str, dst: str,
                       excludes: list[str]) -> tuple[int, int]:
        from skyd.clouds.local import LocalProvisioner  # the nodes are local sandboxes

        return await LocalProvisioner(cloud_name=self.cloud_name).sync_dir(handle, rank, src, dst, excludes)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class TestCloud(Cloud):
    __test__ = False

    name = NAME
    egress_tiers = ((math.inf, 0.10),)
    inter_region_per_gb = None
    minimum_billing_minutes = 0.0
    gpu_ids = ()
    unsupported = frozenset({"spot", "bucket_mounts"})
    check_ttl_s = 300.0

    def __init__(self) -> None:
        self._prov = TestProvisioner(self.name)

    async def check(self) -> tuple[bool, str]:
        try:
            await self._prov.call("GET", "/v1/account")
        except CredentialsError as e:
            return False, str(e)
        except (aiohttp.ClientError, OSError, ResourcesUnavailableError) as e:
            return False, f"API unreachable: {e}"
        return True, "fake instances API (tests)"

    def dynamic_offerings(self) -> list[Offering]:
        return catalog()

    def provisioner(self) -> TestProvisioner:
        return self._prov
