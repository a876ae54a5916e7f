"""RunPodProvisioner: one pod per node, named for the cluster's tag, found again by name.

Create: a GPU offer (``8x_MI300X_SECURE``) is ``podFindAndDeployOnDemand``
(``podRentInterruptable`` with ``bidPerGpu`` = the catalog's spot price for spot) with the
RunPod ``gpuTypeId`` of the offer's card (skyd.clouds.gpunames: ``H100`` is "NVIDIA H100
PCIe", ``H100-SXM`` "NVIDIA H100 80GB HBM3"); a CPU offer (``cpu3c-2-4``) is ``deployCpuPod``
with the flavor as ``instanceId`` (RunPod's CPU-pod call; CPU pods are on-demand only). Both
in the offer's data center (the catalog's zone, e.g. ``EU-RO-1``; a COMMUNITY pod by its
country, ``countryCode`` = the catalog's region), SECURE or COMMUNITY cloud from the instance
type, skyd's public key as ``PUBLIC_KEY`` and the start command of
skyd.clouds.runpod.startcmd, which installs and starts sshd whatever the image (an image
that is not RunPod's own has none). The SSH address is the pod's
``runtime.ports`` entry with ``privatePort == 22`` and ``isIpPublic`` (ip + publicPort).
Stop is ``podStop`` (the GPUs are released; a resume may land on other GPUs or none),
start is ``podResume``.
"""

from __future__ import annotations

from typing import Any

import anyio

from skyd.clouds.base import (
    NODE_PREEMPTED,
    NODE_STOPPED,
    ClusterHandle,
    LogFn,
    ProvisionRequest,
)
from skyd.clouds.neocloud.classify import classify
from skyd.clouds.neocloud.gpus import provider_gpu_id
from skyd.clouds.neocloud.http import APIError
from skyd.clouds.runpod.api import KEY_HINT, RunPodAPI, find_key
from skyd.clouds.runpod.startcmd import docker_args
from skyd.clouds.vm.provisioner import FAILED, PENDING, RUNNING, STOPPED, VM, VMProvisioner, of_tag
from skyd.errors import ClusterStateError, CredentialsError, ResourcesUnavailableError, SkydError
from skyd.models.accelerators import get_accelerator_info

NAME = "runpod"
#: images for pods when the task names none (the start command makes any of them reachable)
AMD_IMAGE = "rocm/pytorch:rocm6.2.3_ubuntu22.04_py3.10_pytorch_release_2.3.0"
NVIDIA_IMAGE = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"
AMD_GPUS = ("MI300X", "MI325X", "MI355X", "MI350X", "MI250X", "MI250", "MI210")


def parse_type(instance_type: str) -> tuple[int, str]:
    """``8x_MI300X_SECURE`` -> (8, "SECURE")."""
    count, _, rest = instance_type.partition("x_")
    cloud = rest.rsplit("_", 1)[-1].upper() if "_" in rest else "SECURE"
    try:
        return int(count), cloud if cloud in ("SECURE", "COMMUNITY") else "SECURE"
    except ValueError:
        return 1, "SECURE"


#: image of CPU pods: plain Ubuntu (the start command adds sshd, python3 and rsync)
CPU_IMAGE = "ubuntu:22.04"


def default_image(accelerator: str | None) -> str:
    if not accelerator:
        return CPU_IMAGE
    return AMD_IMAGE if accelerator in AMD_GPUS else NVIDIA_IMAGE


def min_shape(accelerator: str, count: int, vcpus: float, memory_gib: float) -> dict[str, int]:
    """``minVcpuCount`` / ``minMemoryInGb`` of a GPU pod: the catalog's shape, but never more
    than SkyPilot's RunPod client asks (4 vCPUs and the GPU's memory per GPU). The bundled
    catalog's multi-GPU shapes are not all real machines (8x L40S: 1024 vCPUs, 6016 GB) and a
    minimum no host meets fails everywhere."""
    info = get_accelerator_info(accelerator)
    out: dict[str, int] = {"minVcpuCount": 4 * count}
    if vcpus:
        out["minVcpuCount"] = min(int(vcpus), 4 * count)
    cap = int((info.memory_gib or 0) * count) if info else 0
    mem = int(memory_gib) if memory_gib else cap
    if mem:
        out["minMemoryInGb"] = min(mem, cap) if cap else mem
    return out


def is_cpu_type(instance_type: str) -> bool:
    """RunPod's CPU flavors: ``cpu3c-2-4`` (family, vCPUs, GiB)."""
    return instance_type.startswith("cpu")


def to_vm(pod: dict[str, Any]) -> VM:
    st = str(pod.get("desiredStatus") or "")
    host, port = "", 22
    for p in ((pod.get("runtime") or {}).get("ports") or []):
        if int(p.get("privatePort") or 0) == 22 and p.get("isIpPublic"):
            host, port = str(p.get("ip") or ""), int(p.get("publicPort") or 22)
    if st == "RUNNING":
        state = RUNNING if host else PENDING
    elif st in ("EXITED", "STOPPED"):
        state = STOPPED
    elif st in ("TERMINATED", "DEAD", "FAILED"):
        state = FAILED
    else:
        state = PENDING
    return VM(id=str(pod["id"]), name=str(pod.get("name") or ""), state=state, host=host,
              port=port, internal=host, raw=pod)


class RunPodProvisioner(VMProvisioner):
    NAME = NAME
    ssh_user = "root"
    poll_env = "SKYD_RUNPOD_POLL_S"

    def __init__(self) -> None:
        super().__init__()
        self._api: RunPodAPI | None = None

    async def api(self) -> RunPodAPI:
        if self._api is None:
            key, where = await anyio.to_thread.run_sync(find_key)
            if not key:
                raise CredentialsError("no RunPod API key found", hint=KEY_HINT)
            self._api = RunPodAPI(key, where)
        return self._api

    async def list_vms(self, tag: str, region: str | None) -> list[VM]:
        api = await self.api()
        return [to_vm(p) for p in await api.pods() if of_tag(str(p.get("name") or ""), tag)]

    async def create_vm(self, req: ProvisionRequest, rank: int, name: str, public_key: str) -> None:
        off = req.offering
        image = req.image_id or default_image(off.accelerator)
        if image.startswith("docker:"):
            image = image[len("docker:"):]
        ports = ",".join(["22/tcp", *(f"{p}/tcp" for p in req.ports)])
        common: dict[str, Any] = {
            "name": name, "imageName": image, "containerDiskInGb": req.disk_size or 50,
            "ports": ports, "startSsh": True, "dockerArgs": docker_args(),
            "env": [{"key": "PUBLIC_KEY", "value": public_key},
                    {"key": "SKYD_CLUSTER_TAG", "value": req.cluster_tag}],
        }
        api = await self.api()
        if not off.accelerator:
            if not is_cpu_type(off.instance_type):
                raise ResourcesUnavailableError(
                    f"runpod: {off.instance_type} is neither a GPU type (<n>x_<GPU>_<cloud>) nor a "
                    "CPU flavor (cpu<gen><class>-<vcpus>-<GiB>)", scope="cloud")
            if req.use_spot:
                raise ResourcesUnavailableError(
                    f"runpod: CPU pods ({off.instance_type}) are on-demand only", scope="cloud")
            inp = common | {"instanceId": off.instance_type, "cloudType": "SECURE"}
            if off.zone:
                inp["dataCenterId"] = off.zone
            if off.price:
                inp["deployCost"] = round(float(off.price), 4)  # the most the pod may cost
            await api.deploy_cpu(inp)
            return
        count, cloud_type = parse_type(off.instance_type)
        gpu = provider_gpu_id(NAME, off.accelerator)
        if gpu is None:
            raise ResourcesUnavailableError(
                f"runpod: no RunPod GPU id is known for {off.accelerator}", scope="cloud")
        inp = common | {"gpuTypeId": gpu, "gpuCount": count, "cloudType": cloud_type,
                        "volumeInGb": 0, "supportPublicIp": True}
        if cloud_type == "COMMUNITY":
            # community hosts are not in RunPod's data centers: placed by country (the
            # catalog's region, e.g. "CA"), as dstack's runpod backend does
            if off.region:
                inp["countryCode"] = off.region
        elif off.zone:
            inp["dataCenterId"] = off.zone
        inp |= min_shape(off.accelerator, count, off.vcpus, off.memory_gib)
        if req.use_spot:
            bid = off.spot_price if off.spot_price else None
            if bid is None:
                raise ResourcesUnavailableError(f"runpod: {off.instance_type} has no spot price",
                                                scope="zone")
            inp["bidPerGpu"] = round(float(bid) / max(1, count), 4)
        await api.deploy(inp, spot=req.use_spot)

    async def delete_vm(self, vm: VM) -> None:
        api = await self.api()
        try:
            await api.terminate(vm.id)
        except APIError as e:
            if "not found" not in e.message.lower() and e.status != 404:
                raise

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        if req.num_nodes > 1:
            # pods share no private network (their SSH address is a proxy's): the node
            # agents of a multi-node job could not reach each other
            raise ResourcesUnavailableError(
                f"runpod: {req.num_nodes} nodes asked for, but RunPod pods share no network "
                "between them; runpod serves single-node clusters", scope="cloud",
                field="num_nodes", hint="use one node with more GPUs, or another infra")
        return await super().provision(req, log)

    async def query(self, handle: ClusterHandle) -> list[str]:
        """As the base, but a spot pod found stopped was interrupted (skyd never stops spot
        pods): it is terminated here (an EXITED pod keeps its disk, billed) and reported
        preempted."""
        states = await super().query(handle)
        if handle.use_spot and NODE_STOPPED in states:
            for v in await self.list_vms(handle.cluster_tag, handle.region):
                if v.state == STOPPED:
                    await self.delete_vm(v)
            states = [NODE_PREEMPTED if s == NODE_STOPPED else s for s in states]
        return states

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        if handle.use_spot:
            raise ClusterStateError(
                f"cluster {handle.cluster_name!r} runs on RunPod spot (interruptible) pods, "
                "which cannot be stopped and resumed", hint="use `skyd down`")
        await super().stop(handle, log)

    async def stop_vm(self, vm: VM) -> None:
        await (await self.api()).stop(vm.id)

    async def start_vm(self, vm: VM) -> None:
        await (await self.api()).resume(vm.id, int(vm.raw.get("gpuCount") or 0))

    def classify(self, e: APIError, where: str, has_zone: bool) -> SkydError:
        return classify(e, where=where, has_zone=has_zone, cred_hint=KEY_HINT)

    async def close(self) -> None:
        await super().close()
        if self._api is not None:
            await self._api.close()
