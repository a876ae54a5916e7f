"""GPU names: each provider's own spelling onto the canonical registry
(`skyd.models.accelerators`), by name or by PCI device id; and the post-provision check
that the node agent's own detection (amd-smi / rocm-smi, nvidia-smi) found what was ordered.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Awaitable, Callable

import anyio

from skyd.clouds.base import ClusterHandle
from skyd.errors import ResourcesUnavailableError, SkydError
from skyd.models.accelerators import lookup_accelerator
from skyd.nodeagent.gpu import AMD_DEVICE_IDS

#: provider -> {the provider's GPU id or model: canonical name}. Names not listed go
#: through the registry's own lookup (which ignores case, spaces, "AMD"/"Instinct").
PROVIDER_GPU_NAMES: dict[str, dict[str, str]] = {
    "runpod": {
        "AMD Instinct MI300X OAM": "MI300X", "AMD Instinct MI325X OAM": "MI325X",
        "AMD Instinct MI355X OAM": "MI355X", "NVIDIA H100 80GB HBM3": "H100",
        "NVIDIA H100 PCIe": "H100", "NVIDIA H200": "H200", "NVIDIA A100 80GB PCIe": "A100-80GB",
        "NVIDIA A100-SXM4-80GB": "A100-80GB", "NVIDIA B200": "B200",
    },
    "vultr": {"amd_mi300x": "MI300X", "amd_mi325x": "MI325X", "amd_mi355x": "MI355X",
              "nvidia_h100": "H100", "nvidia_a100": "A100", "nvidia_l40s": "L40S"},
    "hotaisle": {"MI300X": "MI300X", "MI325X": "MI325X", "MI355X": "MI355X"},
    "do": {"amd_mi300x": "MI300X", "amd_mi325x": "MI325X", "amd_mi350x": "MI350X",
           "amd_mi355x": "MI355X", "nvidia_h100": "H100", "nvidia_h200": "H200"},
    "crusoe": {"MI300X-192GB": "MI300X", "MI355X_288GB": "MI355X", "MI355X-288GB": "MI355X",
               "H100-80GB": "H100", "H200-141GB": "H200"},
}

_AMD_IN_TEXT = re.compile(r"MI\d{3}[A-Z]?", re.I)


def canonical_gpu(provider: str, name: str | None, device_id: str | int | None = None) -> str | None:
    """The canonical name for ``provider``'s GPU ``name`` (or PCI ``device_id``, which wins:
    "0x74a1", 0x74A1); None when it is not one the registry knows."""
    if device_id is not None and device_id != "":
        try:
            dev = device_id if isinstance(device_id, int) else int(str(device_id).strip(), 16)
        except ValueError:
            dev = -1
        if dev in AMD_DEVICE_IDS:
            return AMD_DEVICE_IDS[dev]
    if not name:
        return None
    known = PROVIDER_GPU_NAMES.get(provider, {})
    if name in known:
        return known[name]
    low = {k.lower(): v for k, v in known.items()}
    if name.lower() in low:
        return low[name.lower()]
    hit = lookup_accelerator(name)
    if hit:
        return hit
    m = _AMD_IN_TEXT.search(name)
    return lookup_accelerator(m.group(0).upper()) if m else None


def provider_gpu_id(provider: str, canonical: str) -> str | None:
    """The provider's own id for a canonical GPU (the first listed), None if unmapped."""
    for k, v in PROVIDER_GPU_NAMES.get(provider, {}).items():
        if v == canonical:
            return k
    return None


StatusFn = Callable[[ClusterHandle, int], Awaitable[dict[str, object]]]


async def confirm_gpus(handle: ClusterHandle, status: StatusFn, *, where: str,
                       timeout_s: float = 60.0) -> None:
    """Ask every node's agent what it detected (GetStatus) and compare with the order
    (``handle.accelerators``). A node with fewer or other GPUs fails the attempt (scope
    ``zone``: the caller's `forget` removes the nodes and failover goes on), naming both."""
    if not handle.accelerators:
        return
    ((want, count),) = list(handle.accelerators.items())[:1]
    want_c = lookup_accelerator(want) or want
    bad: list[str] = []

    async def one(rank: int) -> None:
        try:
            with anyio.fail_after(timeout_s):
                st = await status(handle, rank)
        except (SkydError, OSError, TimeoutError) as e:
            bad.append(f"node {rank}: the agent did not report its GPUs ({e})")
            return
        gpus = st.get("gpus") or []
        assert isinstance(gpus, list)
        names = Counter(lookup_accelerator(str(g.get("name"))) or str(g.get("name")) for g in gpus)
        if names.get(want_c, 0) < int(count):
            seen = ", ".join(f"{n}:{c}" for n, c in sorted(names.items())) or "no GPUs"
            bad.append(f"node {rank} has {seen}")

    async with anyio.create_task_group() as tg:
        for r in range(len(handle.nodes)):
            tg.start_soon(one, r)
    if bad:
        raise ResourcesUnavailableError(
            f"{where}: the nodes do not have the ordered {want_c}:{count:g} ({'; '.join(sorted(bad))})",
            scope="zone", provider_message="GPU detection on the node (amd-smi / nvidia-smi)")


async def agent_status(ssh: object, handle: ClusterHandle, rank: int) -> dict[str, object]:
    """GetStatus of node ``rank``'s agent through an SSH-style provisioner's endpoint."""
    from skyd.nodeagent.client import AgentClient

    host, port = await ssh.agent_endpoint(handle, rank)  # type: ignore[attr-defined]
    async with AgentClient(host, port, handle.token) as c:
        return await c.status()
