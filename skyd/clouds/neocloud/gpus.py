"""GPU names: each provider's own spelling onto the canonical registry
(`skyd.models.accelerators`), by name or by PCI device id; and the post-provision check
that the node agent's own detection (amd-smi / rocm-smi, nvidia-smi) found what was ordered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from skyd.clouds.base import ClusterHandle
from skyd.clouds.gpunames import canonical_gpu, provider_gpu_id, same_card
from skyd.errors import ResourcesUnavailableError, SkydError
from skyd.models.accelerators import lookup_accelerator

# The provider GPU-name table and the canonicaliser live in skyd.clouds.gpunames (one table
# for every provider); re-exported here for the providers that import them from neocloud.
__all__ = ["agent_status", "canonical_gpu", "confirm_gpus", "provider_gpu_id"]


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
        names = [str(g.get("name")) for g in gpus]
        if sum(1 for n in names if same_card(want_c, n)) < int(count):
            seen = ", ".join(f"{n}:{names.count(n)}" for n in sorted(set(names))) or "no GPUs"
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
