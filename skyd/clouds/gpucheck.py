"""Every node proves its GPUs before the cluster is called UP, on every provider.

The node agent detects its GPUs itself (``skyd.nodeagent.gpu.detect``: nvidia-smi, then
amd-smi in its ROCm 6 and 7 forms, then rocm-smi) and reports them in GetStatus. `confirm`
asks every node's agent and compares the vendor, model and count with the order
(``handle.accelerators``). The pipeline runs it after every successful ``provision``
(`skyd.pipeline.provision`), so no provider can skip it; a provider may run it itself first
(the neocloud base does, to log it) and marks the handle so it is not asked twice.

A node short of GPUs fails the attempt, naming the provider, the location, the image and
what each node showed; the pipeline then removes the attempt's machines (`forget`) and fails
over (scope ``zone``: another zone may have another host image or driver). When the task
chose the image (``resources.image_id``) and a node shows no GPU of the ordered vendor at
all, the image lacks the driver stack: scope ``stop`` with the field and the fix, since no
other location boots a different image.

Models are compared without the form-factor suffix a catalog carries and the driver does not
show (``H100-SXM``, ``H100-MEGA`` and an "H100 80GB HBM3" on the node are the same GPU);
memory variants stay distinct (``A100`` vs ``A100-80GB``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio

from skyd.clouds.base import ClusterHandle, Provisioner
from skyd.clouds.gpunames import same_card
from skyd.errors import ResourcesUnavailableError, SkydError
from skyd.models.accelerators import get_accelerator_info, lookup_accelerator

CONFIRMED = "gpus_confirmed"  # handle.extra key: set once the agents confirmed the GPUs
MACHINES = "machines"  # handle.extra key: what the nodes are, where no image names them
TOOLS = {"nvidia": "nvidia-smi", "amd": "amd-smi / rocm-smi"}
STACKS = {"nvidia": "the NVIDIA driver (and CUDA)", "amd": "ROCm (the amdgpu driver and amd-smi)"}


def vendor_of(name: str) -> str | None:
    info = get_accelerator_info(lookup_accelerator(name) or name)
    if info is None or info.kind != "gpu":
        return None
    return str(info.vendor)


def _where(handle: ClusterHandle) -> str:
    return "/".join(p for p in (handle.cloud, handle.region, handle.zone) if p)


async def confirm(prov: Provisioner, handle: ClusterHandle, *, image: str | None = None,
                  user_image: bool = False, timeout_s: float = 60.0) -> None:
    """Raise ResourcesUnavailableError unless every node's agent reports the ordered GPUs."""
    if not handle.accelerators or handle.extra.get(CONFIRMED):
        return
    acc, count = next(iter(handle.accelerators.items()))
    vendor = vendor_of(acc)
    if vendor is None or count <= 0:
        handle.extra[CONFIRMED] = True  # TPUs and unknown devices: nothing a GPU tool can show
        return
    bad: list[str] = []
    none_of_vendor: list[bool] = []

    async def one(rank: int) -> None:
        from skyd.nodeagent.client import AgentClient

        try:
            with anyio.fail_after(timeout_s):
                host, port = await prov.agent_endpoint(handle, rank)
                async with AgentClient(host, port, handle.token) as c:
                    st: dict[str, Any] = await c.status()
        except (SkydError, OSError, TimeoutError) as e:
            bad.append(f"node {rank}: the agent did not report its GPUs ({e})")
            return
        gpus = [g for g in st.get("gpus") or [] if isinstance(g, dict)]
        ok = sum(1 for g in gpus if str(g.get("vendor")) == vendor
                 and same_card(acc, str(g.get("name"))))  # one GPU-name table (gpunames)
        if ok < int(count):
            seen = Counter(f"{g.get('name')}" for g in gpus)
            shown = ", ".join(f"{n}:{c}" for n, c in sorted(seen.items())) or "no GPUs"
            bad.append(f"node {rank} has {shown}")
            none_of_vendor.append(not any(str(g.get("vendor")) == vendor for g in gpus))

    async with anyio.create_task_group() as tg:
        for r in range(len(handle.nodes)):
            tg.start_soon(one, r)
    if not bad:
        handle.extra[CONFIRMED] = True
        return
    where = _where(handle)
    tool, stack = TOOLS[vendor], STACKS[vendor]
    image = image or (str(handle.extra["image"]) if handle.extra.get("image") else None)
    shown_image = image or f"the default image of {handle.cloud}"
    # a provider whose machines are not booted from an image (Slurm) says what they are
    machines = str(handle.extra.get(MACHINES) or "") or f"image: {shown_image}"
    detail = "; ".join(sorted(bad))
    if user_image and none_of_vendor and all(none_of_vendor) and len(none_of_vendor) == len(bad):
        raise ResourcesUnavailableError(
            f"{where}: the image {image!r} shows no {vendor.upper() if vendor == 'amd' else 'NVIDIA'} "
            f"GPU to {tool} ({detail}): it lacks {stack}",
            scope="stop", field="resources.image_id",
            provider_message=f"GPU detection on the node ({tool}), image {image}",
            hint=f"use an image with {stack}, or remove resources.image_id to get "
                 f"{handle.cloud}'s default GPU image")
    raise ResourcesUnavailableError(
        f"{where}: the nodes do not have the ordered {lookup_accelerator(acc) or acc}:{count:g} "
        f"({detail}); {machines}",
        scope="zone", provider_message=f"GPU detection on the node ({tool}), {machines}")
