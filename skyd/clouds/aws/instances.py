"""EC2 instance calls the provisioner is built from: find by tag, create, wait, states."""

from __future__ import annotations

from typing import Any

import anyio

from skyd import settings as knobs
from skyd.clouds.aws.network import RANK_KEY, TAG_KEY, tag_specs
from skyd.clouds.base import (
    NODE_PENDING,
    NODE_PREEMPTED,
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
)
from skyd.errors import ResourcesUnavailableError

LIVE = ["pending", "running", "stopping", "stopped"]
GONE = ("shutting-down", "terminated")
USER_KEY = "skyd-ssh-user"
SPOT_REASONS = ("Server.SpotInstanceTermination", "Server.SpotInstanceShutdown")


def poll_s() -> float:
    return knobs.AWS_POLL_S.get()


def tags_of(inst: dict[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t["Value"]) for t in inst.get("Tags") or []}


def rank_of(inst: dict[str, Any]) -> int:
    r = tags_of(inst).get(RANK_KEY)
    return int(r) if r and r.isdigit() else 1000 + int(inst.get("AmiLaunchIndex") or 0)


async def by_tag(ec2: Any, tag: str, states: list[str] | None = None,
                 ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Every instance carrying the cluster tag (in ``states``), in rank order."""
    flt = [{"Name": f"tag:{TAG_KEY}", "Values": [tag]}]
    if states:
        flt.append({"Name": "instance-state-name", "Values": states})
    if ids:
        flt.append({"Name": "instance-id", "Values": ids})
    out: list[dict[str, Any]] = []
    pager = ec2.get_paginator("describe_instances")
    async for page in pager.paginate(Filters=flt):
        for r in page.get("Reservations") or []:
            out.extend(r.get("Instances") or [])
    return sorted(out, key=lambda i: (rank_of(i), str(i["InstanceId"])))


def node_state(inst: dict[str, Any] | None) -> str:
    """An EC2 instance's state as a skyd node state; a spot instance EC2 reclaimed (or
    stopped for an interruption) is ``preempted``."""
    if inst is None:
        return NODE_TERMINATED
    state = str((inst.get("State") or {}).get("Name") or "")
    reason = str((inst.get("StateReason") or {}).get("Code") or "")
    spot = inst.get("InstanceLifecycle") == "spot"
    if spot and reason in SPOT_REASONS and state in ("stopping", "stopped", "shutting-down", "terminated"):
        return NODE_PREEMPTED
    if state == "running":
        return NODE_RUNNING
    if state == "pending":
        return NODE_PENDING
    if state in ("stopping", "stopped"):
        return NODE_STOPPED
    return NODE_TERMINATED


async def create(ec2: Any, *, tag: str, name: str, num: int, instance_type: str, zone: str,
                 image: dict[str, Any], key_name: str, sg: str, subnet: str, spot: bool,
                 disk_gb: int, placement_group: str | None, labels: dict[str, str],
                 ssh_user: str, iam_profile: str | None = None,
                 public_ip: bool = True) -> list[dict[str, Any]]:
    """RunInstances for ``num`` nodes in one subnet; each instance then gets its rank tag."""
    import secrets

    placement: dict[str, Any] = {"AvailabilityZone": zone}
    if placement_group:
        placement["GroupName"] = placement_group
    extra = {**labels, USER_KEY: ssh_user}
    args: dict[str, Any] = dict(
        ImageId=image["ImageId"], InstanceType=instance_type, MinCount=num, MaxCount=num,
        KeyName=key_name, Placement=placement,
        NetworkInterfaces=[{"DeviceIndex": 0, "SubnetId": subnet, "Groups": [sg],
                            "AssociatePublicIpAddress": public_ip, "DeleteOnTermination": True}],
        TagSpecifications=tag_specs(tag, name, ("instance", "volume"), extra),
        ClientToken=f"skyd-{secrets.token_hex(12)}",  # botocore's retries stay idempotent
        MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled"},
    )
    if iam_profile:
        args["IamInstanceProfile"] = {"Name": iam_profile}
    root = image.get("RootDeviceName")
    if root:
        args["BlockDeviceMappings"] = [{"DeviceName": root, "Ebs": {
            "VolumeSize": int(disk_gb), "VolumeType": "gp3", "DeleteOnTermination": True}}]
    if spot:
        args["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
            "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
    out = await ec2.run_instances(**args)
    insts = sorted(out.get("Instances") or [], key=lambda i: int(i.get("AmiLaunchIndex") or 0))
    async def tag_rank(inst: dict[str, Any], rank: int) -> None:
        role = "head" if rank == 0 else f"worker{rank}"
        await ec2.create_tags(Resources=[inst["InstanceId"]], Tags=[
            {"Key": RANK_KEY, "Value": str(rank)}, {"Key": "Name", "Value": f"{name}-{role}"}])

    async with anyio.create_task_group() as tg:
        for rank, inst in enumerate(insts):
            tg.start_soon(tag_rank, inst, rank)
    for rank, inst in enumerate(insts):
        inst.setdefault("Tags", []).append({"Key": RANK_KEY, "Value": str(rank)})
    return insts


async def wait_running(ec2: Any, tag: str, ids: list[str], where: str,
                       public: bool = True) -> list[dict[str, Any]]:
    """Poll until every instance runs and has its address; one that ends (a spot instance
    reclaimed, capacity taken back) fails the attempt for this zone."""
    while True:
        insts = await by_tag(ec2, tag, ids=ids)
        for i in insts:
            if (i.get("State") or {}).get("Name") in GONE:
                why = (i.get("StateReason") or {}).get("Message") or "terminated while starting"
                raise ResourcesUnavailableError(f"{where}: instance {i['InstanceId']} ended: {why}",
                                                scope="zone", provider_message=str(why))
        ready = [i for i in insts if (i.get("State") or {}).get("Name") == "running"
                 and i.get("PrivateIpAddress") and (i.get("PublicIpAddress") or not public)]
        if len(ready) == len(ids) and len(insts) == len(ids):
            return insts
        await anyio.sleep(poll_s())


async def wait_state(ec2: Any, tag: str, ids: list[str], states: tuple[str, ...],
                     timeout: float = 600.0) -> None:
    with anyio.move_on_after(timeout):
        while True:
            insts = await by_tag(ec2, tag, ids=ids)
            if all((i.get("State") or {}).get("Name") in states for i in insts):
                return
            await anyio.sleep(poll_s())


async def terminate_tagged(ec2: Any, tag: str, insts: list[dict[str, Any]] | None = None) -> list[str]:
    """Terminate every instance carrying ``tag`` (``insts``: as just described) and wait
    until they are gone."""
    if insts is None:
        insts = await by_tag(ec2, tag)
    ids = [str(i["InstanceId"]) for i in insts if (i.get("State") or {}).get("Name") != "terminated"]
    if ids:
        await ec2.terminate_instances(InstanceIds=ids)
        await wait_state(ec2, tag, ids, ("terminated",))
    return ids
