"""What skyd asks Compute Engine for: instance and firewall bodies, names, labels, states.

- Names: ``<cluster tag>-<rank>`` made a valid GCE name (``[a-z]([-a-z0-9]*[a-z0-9])?``, at
  most 63 characters; a short hash keeps tags that only differ in case or punctuation apart).
  Deterministic, so a retried insert finds its instance (409 alreadyExists) instead of making
  a second one.
- Labels: the task's ``labels`` (keys and values made valid: lower case, ``[a-z0-9_-]``, 63
  characters, keys start with a letter) plus ``skyd-cluster=<tag>`` and ``skyd-rank=<n>``:
  every instance skyd makes is found again by ``labels.skyd-cluster``.
- GPUs: accelerator-optimized machine types (a2, a3, a4, g2) carry their GPUs; others (n1)
  get ``guestAccelerators``. Any VM with a GPU has ``onHostMaintenance: TERMINATE`` (GPUs
  cannot live-migrate), and the metadata key ``install-nvidia-driver: True``: the Deep
  Learning VM images install the NVIDIA driver at first boot only when it is set.
- Spot: ``provisioningModel: SPOT`` with ``instanceTerminationAction: DELETE`` (GCE removes a
  preempted VM and its disk, so nothing is left billing when the cluster row goes; `query`
  tells a preemption from a deletion by the zone's ``compute.instances.preempted`` operation).
  Spot VMs (CPU-only ones too) have ``onHostMaintenance: TERMINATE`` and
  ``automaticRestart: false``: the Compute API's ``Scheduling`` schema allows nothing else
  for SPOT or preemptible VMs.
- Boot disk: ``pd-balanced``, except on the machine series that attach Hyperdisk only
  (`HYPERDISK_ONLY`: A4, A4X, A3 Ultra, C4, C4A, C4D, N4, X4, M4, H4D, G4), which get
  ``hyperdisk-balanced``; the insert of such a VM with a Persistent Disk is refused.
- Ports: one firewall rule per cluster, ``skyd-<tag>``, allowing tcp 22 and the task's ports
  to instances with the network tag ``skyd-<tag>`` (firewall rules have no labels: the name
  and description carry the tag).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from skyd.clouds.base import (
    NODE_PENDING,
    NODE_PREEMPTED,
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    NODE_UNKNOWN,
    GpuIds,
    ProvisionRequest,
)

CLUSTER_LABEL = "skyd-cluster"
RANK_LABEL = "skyd-rank"
DEFAULT_DISK_GB = 256
#: skyd accelerator name -> GCE acceleratorType (attached to n1 machines).
#: GCP's accelerator type ids (the provider's `gpu_ids` fact: GCPCloud.gpu_ids).
GPU_IDS: GpuIds = (
    ("T4", "nvidia-tesla-t4", ()), ("V100", "nvidia-tesla-v100", ()),
    ("P100", "nvidia-tesla-p100", ()), ("P4", "nvidia-tesla-p4", ()),
    ("K80", "nvidia-tesla-k80", ()), ("L4", "nvidia-l4", ()),
    ("A100", "nvidia-tesla-a100", ()), ("A100-80GB", "nvidia-a100-80gb", ()),
    ("H100", "nvidia-h100-80gb", ()), ("H100-MEGA", "nvidia-h100-mega-80gb", ()),
    ("H200", "nvidia-h200-141gb", ()), ("B200", "nvidia-b200", ()),
)
_ACCELERATOR_TYPE = {canon: pid for canon, pid, _ in GPU_IDS}
#: machine families whose GPUs come with the machine type (no guestAccelerators).
ACCELERATOR_OPTIMIZED = ("a2-", "a3-", "a4-", "a4x-", "g2-", "g4-")
#: machine series whose VMs attach Hyperdisk only (Compute Engine docs, "Machine series
#: comparison" / "Hyperdisk: supported machine types"): no Persistent Disk boot disk.
HYPERDISK_ONLY = ("a4-", "a4x-", "a3-ultragpu-", "c4-", "c4a-", "c4d-", "n4-", "n4a-", "n4d-",
                  "x4-", "m4-", "h4d-", "g4-")
#: the metadata key the Deep Learning VM images read at first boot to install the driver.
DRIVER_METADATA = "install-nvidia-driver"
GPU_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu124-debian-11-py310"
CPU_IMAGE = "projects/debian-cloud/global/images/family/debian-12"

#: GCE instance status -> node state (a missing spot VM is "preempted" when GCE says so).
STATUSES = {
    "PROVISIONING": NODE_PENDING, "STAGING": NODE_PENDING, "RUNNING": NODE_RUNNING,
    "STOPPING": NODE_PENDING, "SUSPENDING": NODE_PENDING, "SUSPENDED": NODE_STOPPED,
    "REPAIRING": NODE_PENDING, "TERMINATED": NODE_STOPPED,
}

_BAD = re.compile(r"[^a-z0-9_-]+")


def label_value(text: str) -> str:
    """A valid label value (<= 63 of ``[a-z0-9_-]``); changed text gets a hash suffix so
    two different inputs never share a value."""
    v = _BAD.sub("-", text.lower())[:63]
    if v == text:
        return v
    return (v[:56] + "-" + _hash(text))[:63]


def label_key(text: str) -> str:
    k = _BAD.sub("-", text.lower())[:63]
    return k if k[:1].isalpha() else ("k" + k)[:63]


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def _name_part(text: str) -> str:
    v = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not v[:1].isalpha():
        v = "s" + v
    return v


def instance_name(tag: str, rank: int) -> str:
    base = _name_part(tag)
    suffix = f"-{rank}"
    if base != tag or len(base) + len(suffix) > 63:
        base = base[: 63 - len(suffix) - 7].rstrip("-") + "-" + _hash(tag)
    return base + suffix


def network_tag(tag: str) -> str:
    base = "skyd-" + _name_part(tag)
    if len(base) > 63 or base != "skyd-" + tag:
        base = base[:56].rstrip("-") + "-" + _hash(tag)
    return base


def firewall_name(tag: str) -> str:
    return network_tag(tag)


def label_filter(tag: str) -> str:
    return f"labels.{CLUSTER_LABEL} = {label_value(tag)}"


def labels(req: ProvisionRequest, rank: int) -> dict[str, str]:
    out = {label_key(k): label_value(v) for k, v in req.labels}
    out[CLUSTER_LABEL] = label_value(req.cluster_tag)
    out[RANK_LABEL] = str(rank)
    return out


def image_for(req: ProvisionRequest) -> str:
    img = req.image_id
    if not img:
        return GPU_IMAGE if req.offering.accelerator else CPU_IMAGE
    if img.startswith(("projects/", "global/", "https://")):
        return img
    return f"global/images/{img}"  # an image of the user's own project


def disk_type(machine_type: str) -> str:
    """The boot disk type the machine series takes."""
    return "hyperdisk-balanced" if machine_type.startswith(HYPERDISK_ONLY) else "pd-balanced"


def has_gpu(req: ProvisionRequest) -> bool:
    off = req.offering
    return (bool(off.accelerator) and off.accelerator_count > 0) or \
        off.instance_type.startswith(ACCELERATOR_OPTIMIZED)


def instance_body(req: ProvisionRequest, rank: int, zone: str, *, ssh_user: str,
                  public_key: str, network: str = "default") -> dict[str, Any]:
    off = req.offering
    itype = off.instance_type
    body: dict[str, Any] = {
        "name": instance_name(req.cluster_tag, rank),
        "machineType": f"zones/{zone}/machineTypes/{itype}",
        "labels": labels(req, rank),
        "tags": {"items": [network_tag(req.cluster_tag)]},
        "disks": [{
            "boot": True, "autoDelete": True, "type": "PERSISTENT",
            "initializeParams": {"sourceImage": image_for(req),
                                 "diskSizeGb": str(req.disk_size or DEFAULT_DISK_GB),
                                 "diskType": f"zones/{zone}/diskTypes/{disk_type(itype)}",
                                 "labels": {CLUSTER_LABEL: label_value(req.cluster_tag)}},
        }],
        "networkInterfaces": [{
            "network": f"global/networks/{network}",
            "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}],
        }],
        "metadata": {"items": [
            {"key": "ssh-keys", "value": f"{ssh_user}:{public_key.strip()} {ssh_user}"},
            {"key": CLUSTER_LABEL, "value": req.cluster_tag},
        ]},
        "scheduling": {"automaticRestart": not req.use_spot, "onHostMaintenance": "MIGRATE"},
    }
    gpu = bool(off.accelerator) and off.accelerator_count > 0
    if gpu and not itype.startswith(ACCELERATOR_OPTIMIZED):
        acc = str(off.accelerator)
        body["guestAccelerators"] = [{
            "acceleratorType": f"zones/{zone}/acceleratorTypes/{_ACCELERATOR_TYPE.get(acc, acc.lower())}",
            "acceleratorCount": int(off.accelerator_count),
        }]
    if has_gpu(req):
        body["scheduling"]["onHostMaintenance"] = "TERMINATE"  # GPUs cannot live-migrate
        body["metadata"]["items"].append({"key": DRIVER_METADATA, "value": "True"})
    if req.use_spot:
        # The Scheduling schema: SPOT (and preemptible) VMs allow only TERMINATE, no restart.
        body["scheduling"].update(provisioningModel="SPOT", instanceTerminationAction="DELETE",
                                  automaticRestart=False, onHostMaintenance="TERMINATE")
    return body


def firewall_body(tag: str, ports: list[str], network: str = "default") -> dict[str, Any]:
    return {
        "name": firewall_name(tag),
        "network": f"global/networks/{network}",
        "direction": "INGRESS",
        "allowed": [{"IPProtocol": "tcp", "ports": sorted(set(["22", *ports]), key=_port_key)}],
        "sourceRanges": ["0.0.0.0/0"],
        "targetTags": [network_tag(tag)],
        "description": f"{CLUSTER_LABEL}={tag}",
    }


def _port_key(p: str) -> int:
    return int(p.split("-")[0]) if p.split("-")[0].isdigit() else 0


def node_state(inst: dict[str, Any] | None, preempted: bool = False) -> str:
    if inst is None:
        return NODE_PREEMPTED if preempted else NODE_TERMINATED
    return STATUSES.get(str(inst.get("status")), NODE_UNKNOWN)


def addresses(inst: dict[str, Any]) -> tuple[str, str | None]:
    """(internal IP, external IP or None) of an instance's first interface."""
    nics = inst.get("networkInterfaces") or [{}]
    internal = str(nics[0].get("networkIP") or "")
    ext = next((a.get("natIP") for a in nics[0].get("accessConfigs") or [] if a.get("natIP")), None)
    return internal, ext
