"""SSHCloud: every free host of every node pool is a zero-cost offering (region = pool,
instance_type = host), with the GPUs/cpus/memory found by the last probe (hosts.json)."""

from __future__ import annotations

from pathlib import Path

from skyd.clouds.base import Cloud, Provisioner
from skyd.clouds.offering import Offering
from skyd.clouds.ssh.pools import Pool, load_pools, pools_file
from skyd.clouds.ssh.state import allocations_sync, load_host_facts
from skyd.errors import SkydError


class SSHCloud(Cloud):
    name = "ssh"
    unsupported = frozenset({"spot", "image_id", "bucket_mounts"})

    def __init__(self, pools_path: Path | None = None) -> None:
        self.pools_path = pools_path
        self._prov: Provisioner | None = None

    def pools(self) -> dict[str, Pool]:
        return load_pools(self.pools_path)

    def check(self) -> tuple[bool, str]:
        try:
            pools = self.pools()
        except SkydError as e:
            return False, str(e)
        if not pools:
            return False, f"no SSH node pools ({self.pools_path or pools_file()} missing or empty)"
        n = sum(len(p.hosts) for p in pools.values())
        return True, f"{len(pools)} SSH node pool(s), {n} host(s)"

    def dynamic_offerings(self) -> list[Offering]:
        try:
            pools = self.pools()
        except SkydError:
            return []
        facts = load_host_facts()
        taken = allocations_sync()
        out: list[Offering] = []
        for pool in pools.values():
            for h in pool.hosts:
                if h.key in taken:
                    continue
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

        for p in self.pools().values():
            if pool is None or p.name == pool:
                await check_pool(p)

    def provisioner(self) -> Provisioner:
        if self._prov is None:
            from skyd.clouds.ssh.provisioner import SSHProvisioner

            self._prov = SSHProvisioner(pools_path=self.pools_path)
        return self._prov
