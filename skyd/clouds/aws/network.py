"""skyd's SSH key, and the per-cluster objects around the instances: key pair, security
group (SSH, the task's ports, all traffic between the cluster's nodes) and placement group.

Each is named ``skyd-<cluster tag>``, carries the cluster tag (``skyd-cluster``), is made
idempotently (an existing one is reused) and removed with the cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from skyd import paths
from skyd.errors import ResourcesUnavailableError

TAG_KEY = "skyd-cluster"  # the cluster tag, on every object
NAME_KEY = "skyd-cluster-name"
RANK_KEY = "skyd-rank"
MANAGED_KEY = "skyd-managed"


def object_name(tag: str) -> str:
    return f"skyd-{tag}"


def tag_specs(tag: str, name: str, kinds: tuple[str, ...], extra: dict[str, str] | None = None) -> list[dict[str, Any]]:
    tags = [{"Key": TAG_KEY, "Value": tag}, {"Key": NAME_KEY, "Value": name},
            {"Key": MANAGED_KEY, "Value": "true"}]
    tags += [{"Key": k, "Value": v} for k, v in (extra or {}).items()]
    return [{"ResourceType": k, "Tags": tags} for k in kinds]


# -- skyd's SSH key ----------------------------------------------------------------------


def key_path() -> Path:
    return paths.home() / "aws" / "id_ed25519"


def _make_key() -> tuple[Path, str]:
    """Made once (0600; skyd.transports.ssh_hosts.ensure_key): the public half is always
    derived from the private key, so an existing key is never replaced."""
    from skyd.transports.ssh_hosts import ensure_key

    priv = key_path()
    return priv, ensure_key(priv)


async def ssh_key() -> tuple[Path, str]:
    """(private key path (0600), public key line) of skyd's own key for AWS nodes."""
    return await anyio.to_thread.run_sync(_make_key)


# -- per-cluster objects -------------------------------------------------------------------


async def ensure_key_pair(ec2: Any, tag: str, name: str, public_key: str) -> str:
    from botocore.exceptions import ClientError

    kp = object_name(tag)
    try:
        await ec2.import_key_pair(KeyName=kp, PublicKeyMaterial=public_key.encode(),
                                  TagSpecifications=tag_specs(tag, name, ("key-pair",)))
    except ClientError as e:
        from skyd.clouds.aws.errors import is_code

        if not is_code(e, "InvalidKeyPair.Duplicate"):
            raise
    return kp


async def default_subnet(ec2: Any, zone: str) -> tuple[str, str]:
    """(vpc id, subnet id) of the default subnet of ``zone``."""
    out = await ec2.describe_subnets(Filters=[{"Name": "availability-zone", "Values": [zone]},
                                              {"Name": "default-for-az", "Values": ["true"]}])
    subnets = out.get("Subnets") or []
    if not subnets:
        raise ResourcesUnavailableError(
            f"aws/{zone}: no default subnet in this zone", scope="zone",
            hint="create a default VPC (aws ec2 create-default-vpc) or pick another zone")
    s = subnets[0]
    return str(s["VpcId"]), str(s["SubnetId"])


async def named_subnet(ec2: Any, vpc_name: str, zone: str) -> tuple[str, str]:
    """(vpc id, subnet id) in ``zone`` of the VPC tagged ``Name=vpc_name`` (config
    ``aws.vpc_name``), as SkyPilot looks it up."""
    out = await ec2.describe_vpcs(Filters=[{"Name": "tag:Name", "Values": [vpc_name]}])
    vpcs = out.get("Vpcs") or []
    if not vpcs:
        raise ResourcesUnavailableError(
            f"aws/{zone}: no VPC named {vpc_name!r} in this region", scope="region",
            hint="fix aws.vpc_name in your config, or create the VPC (tag Name) in this region")
    vpc = str(vpcs[0]["VpcId"])
    subs = await ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]},
                                               {"Name": "availability-zone", "Values": [zone]}])
    subnets = subs.get("Subnets") or []
    if not subnets:
        raise ResourcesUnavailableError(
            f"aws/{zone}: VPC {vpc_name!r} has no subnet in this zone", scope="zone",
            hint="add a subnet in this zone to the VPC, or pick another zone")
    return vpc, str(subnets[0]["SubnetId"])


def port_ranges(ports: tuple[str, ...] | list[str]) -> list[tuple[int, int]]:
    out = []
    for p in ports:
        lo, _, hi = str(p).partition("-")
        out.append((int(lo), int(hi or lo)))
    return out


def _perm(lo: int, hi: int) -> dict[str, Any]:
    return {"IpProtocol": "tcp", "FromPort": lo, "ToPort": hi,
            "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": "skyd"}]}


async def ensure_security_group(ec2: Any, tag: str, name: str, vpc: str, ports: tuple[str, ...],
                                group_name: str | None = None) -> str:
    """The cluster's security group (made once): SSH and ``ports`` from anywhere, every
    protocol between members. Two calls when new (create, one authorize). ``group_name``
    (config ``aws.security_group_name``): that group, reused when it exists."""
    from botocore.exceptions import ClientError

    from skyd.clouds.aws.errors import is_code

    gname = group_name or object_name(tag)
    try:
        made = await ec2.create_security_group(
            GroupName=gname, Description=f"skyd cluster {name}", VpcId=vpc,
            TagSpecifications=tag_specs(tag, name, ("security-group",)))
    except ClientError as e:
        if not is_code(e, "InvalidGroup.Duplicate"):
            raise
        found = await ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [gname]},
                                                            {"Name": "vpc-id", "Values": [vpc]}])
        gid = str(found["SecurityGroups"][0]["GroupId"])
        await open_ports(ec2, gid, ("22", *ports))
        return gid
    gid = str(made["GroupId"])
    perms = [_perm(22, 22), {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": gid}]}]
    perms += [_perm(lo, hi) for lo, hi in port_ranges(ports) if (lo, hi) != (22, 22)]
    await ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=perms)
    return gid


async def open_ports(ec2: Any, gid: str, ports: tuple[str, ...] | list[str]) -> None:
    from botocore.exceptions import ClientError

    from skyd.clouds.aws.errors import is_code

    for lo, hi in port_ranges(ports):
        try:
            await ec2.authorize_security_group_ingress(GroupId=gid, IpPermissions=[_perm(lo, hi)])
        except ClientError as e:
            if not is_code(e, "InvalidPermission.Duplicate"):
                raise


async def ensure_placement_group(ec2: Any, tag: str, name: str) -> str:
    from botocore.exceptions import ClientError

    from skyd.clouds.aws.errors import is_code

    pg = object_name(tag)
    try:
        await ec2.create_placement_group(GroupName=pg, Strategy="cluster",
                                         TagSpecifications=tag_specs(tag, name, ("placement-group",)))
    except ClientError as e:
        if not is_code(e, "InvalidPlacementGroup.Duplicate"):
            raise
    return pg


async def delete_cluster_objects(ec2: Any, tag: str, placement_groups: set[str] | None = None) -> None:
    """Remove the security group, placement group and key pair of cluster ``tag`` (its
    instances must be terminated first). Idempotent."""
    from botocore.exceptions import ClientError

    from skyd.clouds.aws.errors import is_code

    flt = [{"Name": f"tag:{TAG_KEY}", "Values": [tag]}]
    sgs = (await ec2.describe_security_groups(Filters=flt)).get("SecurityGroups") or []
    for g in sgs:
        for attempt in range(30):  # DependencyViolation while ENIs detach
            try:
                await ec2.delete_security_group(GroupId=g["GroupId"])
                break
            except ClientError as e:
                if is_code(e, "InvalidGroup.NotFound"):
                    break
                if not is_code(e, "DependencyViolation") or attempt == 29:
                    raise
                await anyio.sleep(2.0)
    for pg in sorted(placement_groups or ()):  # by name: skyd-<tag>, the one skyd makes
        try:
            await ec2.delete_placement_group(GroupName=pg)
        except ClientError as e:
            if not is_code(e, "InvalidPlacementGroup.Unknown", "InvalidPlacementGroup.NotFound"):
                raise
    await ec2.delete_key_pair(KeyName=object_name(tag))  # idempotent: no error when absent
