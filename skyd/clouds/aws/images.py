"""The image an instance boots, and the checks on it.

Without ``resources.image_id``, the default image follows the accelerator's vendor:
an AWS Deep Learning AMI (NVIDIA driver + CUDA) for NVIDIA GPUs, a ROCm image for AMD GPUs
where the region offers one (else the plain image, with a note), and Ubuntu 22.04 for
CPU-only types; always of the instance type's architecture. They are found with
describe_images name filters (newest first) and cached per region for a day (in memory and
under ``$SKYD_HOME/aws/images.json``).

A given ``image_id`` is checked before anything is created: it must exist in the region and
match the instance type's architecture (a clear error otherwise).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import threading
import time
import weakref
from typing import Any

import anyio

from skyd import paths
from skyd.errors import ResourcesUnavailableError
from skyd.models.accelerators import get_accelerator_info, lookup_accelerator

CACHE_TTL_S = 86400.0
CANONICAL = "099720109477"
_ARCH_NAME = {"x86_64": "amd64", "arm64": "arm64"}

#: vendor -> (owners, name patterns in order of preference); "{arch}" / "{deb}" substituted.
PATTERNS: dict[str, tuple[list[str], list[str]]] = {
    "nvidia": (["amazon"], [
        "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *",
        "Deep Learning * Nvidia Driver * (Ubuntu 22.04) *",
        "Deep Learning AMI*Ubuntu*",
    ]),
    "amd": (["amazon", "aws-marketplace"], ["*ROCm*Ubuntu*22.04*", "*ROCm*"]),
    "cpu": ([CANONICAL], [
        "ubuntu/images/hvm-ssd*/ubuntu-jammy-22.04-{deb}-server-*",
        "ubuntu/images/hvm-ssd*/ubuntu-*-{deb}-server-*",
    ]),
}

_MEM: dict[tuple[str, str, str], tuple[float, dict[str, Any]]] = {}
_WRITE_LOCK = threading.Lock()
_LOOKUP_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.Lock] = weakref.WeakKeyDictionary()


def vendor_of(accelerator: str | None) -> str:
    """Which image family an instance of this accelerator boots: "nvidia", "amd", or "cpu"
    (no accelerator, or AWS Inferentia/Trainium and Intel Gaudi, which carry their own
    runtimes). The vendor is the accelerator registry's (the one place GPU names are read);
    a name it does not know is taken as an NVIDIA card (most of EC2's GPU types)."""
    if not accelerator:
        return "cpu"
    info = get_accelerator_info(lookup_accelerator(accelerator) or accelerator)
    if info is None:
        return "nvidia"
    return info.vendor if info.vendor in ("nvidia", "amd") else "cpu"


def ssh_user(image: dict[str, Any]) -> str:
    """The login user of an image (Ubuntu images: ubuntu; Amazon Linux, RHEL, SUSE: ec2-user)."""
    name = f"{image.get('Name', '')} {image.get('Description', '')}".lower()
    if "ubuntu" in name:
        return "ubuntu"
    if any(w in name for w in ("amazon linux", "amzn", "al2023", "rhel", "suse", "amazonlinux")):
        return "ec2-user"
    return "ubuntu"


def _cache_file() -> str:
    return str(paths.home() / "aws" / "images.json")


def _read_disk() -> dict[str, Any]:
    try:
        with open(_cache_file(), encoding="utf-8") as f:
            return dict(json.load(f))
    except (OSError, ValueError):
        return {}


def _write_disk(data: dict[str, Any]) -> None:
    path = _cache_file()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


async def _cached(region: str, vendor: str, arch: str) -> dict[str, Any] | None:
    key = (region, vendor, arch)
    hit = _MEM.get(key)
    if hit and time.time() - hit[0] < CACHE_TTL_S:
        return hit[1]
    disk = await anyio.to_thread.run_sync(_read_disk)
    row = disk.get("/".join(key))
    if row and time.time() - float(row.get("at", 0)) < CACHE_TTL_S:
        _MEM[key] = (float(row["at"]), dict(row["image"]))
        return dict(row["image"])
    return None


async def _remember(region: str, vendor: str, arch: str, image: dict[str, Any]) -> None:
    now = time.time()
    _MEM[(region, vendor, arch)] = (now, image)

    def write() -> None:
        with _WRITE_LOCK:
            disk = _read_disk()
            disk["/".join((region, vendor, arch))] = {"at": now, "image": image}
            _write_disk(disk)

    await anyio.to_thread.run_sync(write)


def _slim(img: dict[str, Any]) -> dict[str, Any]:
    keep = ("ImageId", "Name", "Description", "Architecture", "RootDeviceName", "CreationDate")
    return {k: img.get(k) for k in keep if img.get(k) is not None}


async def _find(ec2: Any, vendor: str, arch: str) -> dict[str, Any] | None:
    owners, patterns = PATTERNS[vendor]
    for pat in patterns:
        name = pat.format(arch=arch, deb=_ARCH_NAME.get(arch, arch))
        out = await ec2.describe_images(Owners=owners, Filters=[
            {"Name": "name", "Values": [name]}, {"Name": "architecture", "Values": [arch]},
            {"Name": "state", "Values": ["available"]}])
        imgs = sorted(out.get("Images") or [], key=lambda i: str(i.get("CreationDate") or ""))
        if imgs:
            return _slim(imgs[-1])
    return None


async def default_image(ec2: Any, region: str, accelerator: str | None, arch: str,
                        log: Any = None) -> dict[str, Any]:
    """The default image for an instance of this accelerator and architecture."""
    vendor = vendor_of(accelerator)
    lock = _LOOKUP_LOCKS.setdefault(asyncio.get_running_loop(), anyio.Lock())
    async with lock:  # the nodes of many clusters starting at once look it up once
        hit = await _cached(region, vendor, arch)
        if hit is not None:
            return hit
        return await _lookup(ec2, region, vendor, arch, log)


async def _lookup(ec2: Any, region: str, vendor: str, arch: str, log: Any) -> dict[str, Any]:
    img = await _find(ec2, vendor, arch)
    if img is None and vendor != "cpu":
        if log is not None:
            log(f"aws/{region}: no {vendor.upper()} image found for {arch}; using the plain Ubuntu image")
        img = await _find(ec2, "cpu", arch)
    if img is None:
        raise ResourcesUnavailableError(
            f"aws/{region}: no default {arch} image found (describe_images)", scope="region",
            hint="set resources.image_id to an AMI of this region")
    await _remember(region, vendor, arch, img)
    return img


async def given_image(ec2: Any, region: str, image_id: str, arch: str, instance_type: str) -> dict[str, Any]:
    """``image_id`` as EC2 knows it, checked against the instance type's architecture."""
    from botocore.exceptions import ClientError

    from skyd.clouds.aws.errors import is_code

    try:
        out = await ec2.describe_images(ImageIds=[image_id])
    except ClientError as e:
        if is_code(e, "InvalidAMIID"):
            out = {"Images": []}
        else:
            raise
    imgs = out.get("Images") or []
    if not imgs:
        raise ResourcesUnavailableError(
            f"image {image_id!r} does not exist in aws/{region}", scope="stop",
            field="resources.image_id",
            hint="use an AMI id of this region (aws ec2 describe-images --region " + region
                 + "), or a per-region mapping: image_id: {" + region + ": ami-...}")
    img = _slim(imgs[0])
    have = img.get("Architecture")
    if have and arch and have != arch:
        raise ResourcesUnavailableError(
            f"image {image_id!r} is built for {have}, but {instance_type} runs {arch}",
            scope="stop", field="resources.image_id",
            hint=f"choose an {arch} image, or an instance type with {have} processors")
    return img
