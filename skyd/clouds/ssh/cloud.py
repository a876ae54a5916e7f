"""SSHCloud: every host of every node pool is a zero-cost offering (region = pool,
instance_type = host), with the GPUs/cpus/memory found by the last probe (hosts.json).

Probed facts (docs/ssh.md, "Planning"): ``dynamic_offerings`` reads ``hosts.json``. Hosts
without facts are probed before planning: by the daemon at start (background, see plugin.py),
by ``skyd ssh check``, by provisioning, and on demand when ``dynamic_offerings`` runs in a
worker thread of the daemon's event loop (the planner solves in one): it then probes the
unprobed hosts on the loop (``anyio.from_thread``), bounded by PROBE_TIMEOUT_S; a host that
could not be reached is not probed again for NEGATIVE_TTL_S.

Order matters on ties (every host costs 0): pools with more free hosts first, and in a pool
free hosts before hosts other clusters hold, hosts without GPUs before GPU hosts (a CPU task
does not take a GPU box while a plain one is free; the provisioner keeps a cluster
homogeneous: with an accelerator, every node must have it). Held hosts are still offered, so a launch pinned
to a full pool fails in the provisioner with an error naming the pool and the fix instead of
a bare "not offered".
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import anyio

from skyd.clouds.base import Cloud, Provisioner
from skyd.clouds.offering import Offering
from skyd.clouds.ssh.pools import Pool, PoolHost, get_pool, load_pools, pools_file
from skyd.clouds.ssh.state import allocations_sync, load_host_facts
from skyd.errors import SkydError

PROBE_TIMEOUT_S = 8.0
NEGATIVE_TTL_S = 30.0


class SSHCloud(Cloud):
    name = "ssh"
    egress_tiers = ((math.inf, 0.0),)  # the user's own hosts
    inter_region_per_gb = None
    minimum_billing_minutes = 0.0
    gpu_ids = ()
    unsupported = frozenset({"spot", "image_id"})
    config_keys = frozenset({"ssh.allowed_node_pools"})
    check_ttl_s = 0.0  # the check only reads the pools file: asked again on every plan

    def __init__(self, pools_path: Path | None = None) -> None:
        self.pools_path = pools_path
        self._prov: Provisioner | None = None
        self._failed: dict[str, float] = {}  # host key -> monotonic time of a failed probe

    def pools(self) -> dict[str, Pool]:
        """The node pools, limited to the config's ``ssh.allowed_node_pools`` when set."""
        from skyd import config

        pools = load_pools(self.pools_path)
        allowed = config.section("ssh").get("allowed_node_pools")
        if allowed is None:
            return pools
        return {k: v for k, v in pools.items() if k in set(allowed)}

    def validate_location(self, region: str | None, zone: str | None) -> None:
        if region:
            self.validate_pool(region)

    def validate_pool(self, name: str) -> Pool:
        """The pool ``name``; NotFoundError with a did-you-mean hint for a typo."""
        return get_pool(name, self.pools())

    async def check(self) -> tuple[bool, str]:
        return await anyio.to_thread.run_sync(self.check_config)  # reads the pools file

    def check_config(self) -> tuple[bool, str]:
        """The check without network: are there pools (the planner's cheap gate)."""
        try:
            pools = self.pools()
        except SkydError as e:
            return False, str(e)
        if not pools:
            return False, f"no SSH node pools ({self.pools_path or pools_file()} missing or empty)"
        n = sum(len(p.hosts) for p in pools.values())
        return True, f"{len(pools)} SSH node pool(s), {n} host(s)"

    def _unprobed(self, pools: dict[str, Pool]) -> list[PoolHost]:
        facts = load_host_facts()
        now = time.monotonic()
        return [
            h for p in pools.values() for h in p.hosts
            if h.key not in facts and now - self._failed.get(h.key, -1e9) > NEGATIVE_TTL_S
        ]  # fmt: skip

    def dynamic_offerings(self) -> list[Offering]:
        try:
            pools = self.pools()
        except SkydError:
            return []
        if self._unprobed(pools):
            try:  # only works from a worker thread of a running event loop (the planner's)
                anyio.from_thread.run(self.probe_unprobed)
            except RuntimeError:
                pass  # no loop to probe on: the cache only
        facts = load_host_facts()
        taken = allocations_sync()

        def free(p: Pool) -> int:
            return sum(1 for h in p.hosts if h.key not in taken)

        out: list[Offering] = []
        for pool in sorted(pools.values(), key=free, reverse=True):
            for h in sorted(pool.hosts, key=lambda h: (h.key in taken, _gpus(facts, h))):
                f = facts.get(h.key, {})
                out.append(
                    Offering(
                        cloud="ssh",
                        instance_type=h.name,
                        accelerator=f.get("accelerator"),
                        accelerator_count=float(f.get("accelerator_count") or 0),
                        vcpus=float(f.get("cpus") or 0),
                        memory_gib=float(f.get("memory_gib") or 0),
                        region=pool.name,
                        zone=None,
                        price=0.0,
                        spot_price=None,
                        accelerator_memory_gib=f.get("accelerator_memory_gib"),
                    )
                )
        return out

    async def probe(self, pool: str | None = None) -> None:
        """Probe hosts (all pools, or one) and refresh hosts.json; the solver then sees their
        GPUs. ``skyd ssh check`` does the same."""
        from skyd.clouds.ssh.check import check_pool

        for p in (await anyio.to_thread.run_sync(self.pools)).values():
            if pool is None or p.name == pool:
                await check_pool(p)

    async def probe_unprobed(self) -> int:
        """Probe the hosts that have no cached facts (concurrently, bounded in time);
        returns how many were probed successfully."""
        from skyd.clouds.ssh.check import check_host

        def unprobed() -> tuple[list[PoolHost], dict[str, str]]:  # file reads: off the loop
            return self._unprobed(self.pools()), allocations_sync()

        hosts, owners = await anyio.to_thread.run_sync(unprobed)
        done = 0

        async def one(h: PoolHost) -> None:
            nonlocal done
            rep = await check_host(h, owners.get(h.key), timeout=PROBE_TIMEOUT_S)
            if rep.facts:
                done += 1
            else:
                self._failed[h.key] = time.monotonic()

        with anyio.move_on_after(PROBE_TIMEOUT_S + 2):
            async with anyio.create_task_group() as tg:
                for h in hosts:
                    tg.start_soon(one, h)
        return done

    def provisioner(self) -> Provisioner:
        if self._prov is None:
            from skyd.clouds.ssh.provisioner import SSHProvisioner

            self._prov = SSHProvisioner(pools_path=self.pools_path)
        return self._prov

    async def close(self) -> None:
        if self._prov is not None:
            await self._prov.close()


def _gpus(facts: dict[str, dict[str, object]], h: PoolHost) -> float:
    return float(facts.get(h.key, {}).get("accelerator_count") or 0)  # type: ignore[arg-type]
