"""KubernetesCloud: the ``kubernetes`` infra (``k8s``); kubeconfig contexts are regions.

Offerings are computed from each reachable context's nodes (cached from the last check or
listing): per accelerator, counts up to the largest node's, with a proportional share of
that node's CPUs and memory; CPU-only shapes up to the largest node. Prices are 0.
"""

from __future__ import annotations

import math
import time
from typing import Any

import anyio

from skyd.clouds.base import Cloud
from skyd.clouds.kubernetes import config, inventory
from skyd.clouds.kubernetes.api import KubeAPIError, KubeUnreachable
from skyd.clouds.kubernetes.provisioner import NAME, KubeProvisioner
from skyd.clouds.offering import Offering
from skyd.errors import CredentialsError, InvalidSpecError, SkydError

CACHE_TTL_S = 30.0


def shape(cpus: float, mem: float, acc: str | None = None, n: int = 0) -> str:
    s = f"{cpus:g}CPU--{mem:g}GB"
    return f"{s}--{acc}:{n}" if acc else s


def offerings_for(ctx: str, nodes: list[inventory.Node], allow_spot: bool = True) -> list[Offering]:
    """Spot is offered where the context has nodes labelled spot/preemptible (with that
    accelerator), unless ``allow_spot: false``."""
    out: list[Offering] = []
    ready = [n for n in nodes if n.ready]
    if not ready:
        return out

    def spot(acc: str | None) -> float | None:
        ok = allow_spot and any(n.spot and (acc is None or any(g.accelerator == acc for g in n.gpus))
                                for n in ready)
        return 0.0 if ok else None

    top_cpu = max(n.cpus for n in ready)
    top_mem = max(n.memory_gib for n in ready)
    c = 1.0
    while c <= top_cpu:
        mem = min(4 * c, top_mem)
        out.append(Offering(NAME, shape(c, mem), None, 0.0, c, mem, ctx, None, 0.0, spot(None)))
        c *= 2
    per: dict[str, inventory.Node] = {}
    for n in ready:
        for g in n.gpus:
            best = per.get(g.accelerator)
            if best is None or g.count > max(x.count for x in best.gpus if x.accelerator == g.accelerator):
                per[g.accelerator] = n
    for acc, n in sorted(per.items()):
        total = max(g.count for g in n.gpus if g.accelerator == acc)
        counts = sorted({k for k in (1, 2, 4, 8, 16) if k <= total} | {total})
        for k in counts:
            cpus = max(1.0, int(n.cpus * 0.9 * k / total))
            mem = max(1.0, int(n.memory_gib * 0.9 * k / total))
            out.append(Offering(NAME, shape(cpus, mem, acc, k), acc, float(k), cpus, mem, ctx, None, 0.0,
                                spot(acc)))
    return out


class KubernetesCloud(Cloud):
    name = NAME
    egress_tiers = ((math.inf, 0.0),)  # the user's cluster: no per-GB price skyd knows
    inter_region_per_gb = None
    minimum_billing_minutes = 0.0
    gpu_ids = ()
    unsupported = frozenset({"disk_size", "bucket_mounts"})
    native_containers = True  # docker:<img> is the pod's image
    config_keys = frozenset({
        "kubernetes.allowed_contexts", "kubernetes.namespace", "kubernetes.pod_config",
        "kubernetes.provision_timeout", "kubernetes.autoscaler", "kubernetes.ports",
        "kubernetes.pending_timeout_s", "kubernetes.ports_service_type", "kubernetes.image",
        "kubernetes.image_amd", "kubernetes.image_cpu", "kubernetes.allow_spot"})
    check_ttl_s = 120.0
    provision_timeout_s = 900.0

    def __init__(self) -> None:
        self._prov = KubeProvisioner()
        self._nodes: dict[str, tuple[float, list[inventory.Node]]] = {}

    def provisioner(self) -> KubeProvisioner:
        return self._prov

    async def probe(self, ctx: str) -> tuple[bool, str]:
        """One context: list its nodes and pods (what planning needs), then pods in the
        namespace skyd creates in (RBAC)."""
        try:
            api = self._prov.api(ctx)
            nodes = await self._prov.inventory(ctx)
            await api.call("list_namespaced_pod", api.namespace, limit=1)
        except KubeAPIError as e:
            if e.status in (401, 403):
                return False, f"forbidden: {e.api_message}"
            return False, str(e)
        except (KubeUnreachable, CredentialsError, InvalidSpecError) as e:
            return False, e.message
        self._nodes[ctx] = (time.monotonic(), nodes)
        gpus = inventory.gpu_summary(nodes)
        what = ", ".join(f"{a} {r['free']}/{r['total']}" for a, r in sorted(gpus.items())) or "no GPUs"
        return True, f"{len(nodes)} node(s), namespace {api.namespace}, {what}"

    async def contexts(self) -> dict[str, tuple[bool, str]]:
        ctxs, err = await anyio.to_thread.run_sync(config.load_contexts)
        out: dict[str, tuple[bool, str]] = {}
        if err:
            return out

        async def one(name: str) -> None:
            with anyio.move_on_after(10) as scope:
                out[name] = await self.probe(name)
            if scope.cancelled_caught:
                out[name] = (False, "API server did not answer within 10 s")

        async with anyio.create_task_group() as tg:
            for c in ctxs:
                tg.start_soon(one, c.name)
        return {k: out[k] for k in sorted(out)}

    async def check(self) -> tuple[bool, str]:
        ctxs, err = await anyio.to_thread.run_sync(config.load_contexts)
        if err:
            return False, err
        if not ctxs:
            return False, f"no contexts in {config.kubeconfig_path()}"
        res = await self.contexts()
        ok = [k for k, (e, _) in res.items() if e]
        lines = "; ".join(f"{k}: {'ok' if e else 'unavailable'} ({why})" for k, (e, why) in res.items())
        return bool(ok), lines

    async def refresh(self) -> None:
        ctxs, _ = await anyio.to_thread.run_sync(config.load_contexts)
        stale = [c.name for c in ctxs
                 if c.name not in self._nodes or time.monotonic() - self._nodes[c.name][0] > CACHE_TTL_S]
        if stale:
            async with anyio.create_task_group() as tg:
                for c in stale:
                    tg.start_soon(self._refresh_one, c)

    async def _refresh_one(self, ctx: str) -> None:
        nodes: list[inventory.Node] = []  # unreachable: offers nothing until the next refresh
        with anyio.move_on_after(10):
            try:
                nodes = await self._prov.inventory(ctx)
            except SkydError:
                pass
        self._nodes[ctx] = (time.monotonic(), nodes)

    def dynamic_offerings(self) -> list[Offering]:
        try:  # from a worker thread of the planner's event loop
            anyio.from_thread.run(self.refresh)
        except RuntimeError:
            pass
        allow = config.settings().get("allow_spot", True) is not False
        out: list[Offering] = []
        for ctx, (_, nodes) in sorted(self._nodes.items()):
            out += offerings_for(ctx, nodes, allow)
        return out

    def validate_location(self, region: str | None, zone: str | None) -> None:
        if zone:
            raise InvalidSpecError("kubernetes has no zones: write kubernetes/<context>",
                                   field="resources.infra")
        if region:
            ctxs, err = config.load_contexts()
            if region not in {c.name for c in ctxs}:
                names = ", ".join(c.name for c in ctxs) or "none"
                raise InvalidSpecError(f"unknown kubernetes context {region!r}" + (f" ({err})" if err else ""),
                                       field="resources.infra", hint=f"contexts in the kubeconfig: {names}")

    async def gpu_table(self) -> list[dict[str, Any]]:
        """``show-gpus --infra k8s``: per context and accelerator, free and total GPUs."""
        ctxs, _ = await anyio.to_thread.run_sync(config.load_contexts)
        rows: list[dict[str, Any]] = []

        async def one(ctx: str) -> None:
            try:
                nodes = await self._prov.inventory(ctx)
            except SkydError as e:
                rows.append({"context": ctx, "accelerator": None, "error": e.message})
                return
            for acc, r in sorted(inventory.gpu_summary(nodes).items()):
                rows.append({"context": ctx, "accelerator": acc, **r})

        async with anyio.create_task_group() as tg:
            for c in ctxs:
                tg.start_soon(one, c.name)
        return sorted(rows, key=lambda r: (r["context"], r["accelerator"] or ""))
