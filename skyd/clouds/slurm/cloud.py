"""SlurmCloud: every partition of every cluster in ``~/.slurm/config`` is a zero-cost
offering (region = cluster, zone = partition), with the GPUs found by the last probe
(``scontrol show partition/node`` over SSH, cached in ``$SKYD_HOME/slurm/facts.json``).

``check`` reaches every cluster's login host and refreshes the facts; the planner reads the
cache (and probes on demand from its worker thread when there is none).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skyd import paths
from skyd.clouds.base import Cloud, Provisioner
from skyd.clouds.offering import Offering
from skyd.clouds.slurm.config import SlurmCluster, get_cluster, load_clusters
from skyd.errors import SkydError

if TYPE_CHECKING:
    from skyd.clouds.slurm.provisioner import SlurmProvisioner

PROBE_TIMEOUT_S = 15.0
NEGATIVE_TTL_S = 60.0  # an unreachable cluster is not probed again by the planner for this long


def facts_path() -> Path:
    return paths.home() / "slurm" / "facts.json"


def load_facts() -> dict[str, Any]:
    try:
        return dict(json.loads(facts_path().read_text()))
    except (OSError, ValueError):
        return {}


def save_facts(update: dict[str, Any]) -> None:
    cur = load_facts()
    cur.update(update)
    p = facts_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(cur, indent=1))
    tmp.replace(p)


@dataclass
class ClusterReport:
    cluster: str
    login: str
    ok: bool
    message: str
    partitions: list[dict[str, Any]] = field(default_factory=list)


def offerings_from(facts: dict[str, Any]) -> list[Offering]:
    out: list[Offering] = []
    for cname in sorted(facts):
        for p in facts[cname].get("partitions", []):
            if p.get("state", "UP") != "UP":
                continue
            common = dict(cloud="slurm", instance_type=p["name"], vcpus=float(p.get("cpus") or 0),
                          memory_gib=float(p.get("memory_gib") or 0), region=cname, zone=p["name"],
                          price=0.0, spot_price=None)  # fmt: skip
            out.append(Offering(accelerator=None, accelerator_count=0.0, **common))  # type: ignore[arg-type]
            acc, n = p.get("accelerator"), int(p.get("gpus_per_node") or 0)
            if acc and n:
                for k in range(1, n + 1):
                    out.append(Offering(accelerator=acc, accelerator_count=float(k), **common))  # type: ignore[arg-type]
    return out


class SlurmCloud(Cloud):
    name = "slurm"
    egress_tiers = ((math.inf, 0.0),)  # the user's own cluster
    inter_region_per_gb = None
    minimum_billing_minutes = 0.0
    gpu_ids = ()
    unsupported = frozenset({"spot", "ports", "disk_size", "image_id", "docker_image", "labels"})
    config_keys = frozenset({"slurm.sbatch_options", "slurm.clusters"})
    check_ttl_s = 300.0

    def __init__(self, config_path: Path | None = None) -> None:
        self.config_path = config_path
        self._prov: SlurmProvisioner | None = None
        self._failed: dict[str, float] = {}  # cluster -> monotonic time of a failed probe

    def clusters(self) -> dict[str, SlurmCluster]:
        return load_clusters(self.config_path)

    def validate_location(self, region: str | None, zone: str | None) -> None:
        if region:
            get_cluster(region, self.clusters(), self.config_path)

    async def check(self) -> tuple[bool, str]:
        try:
            clusters = await anyio.to_thread.run_sync(self.clusters)
        except SkydError as e:
            return False, str(e)
        if not clusters:
            from skyd.clouds.slurm.config import config_path

            return False, f"no Slurm clusters ({self.config_path or config_path()} missing or empty)"
        reports = await self.probe()
        ok = [r for r in reports if r.ok]
        lines = [r.message for r in reports]
        return bool(ok), f"{len(ok)}/{len(reports)} Slurm cluster(s) reachable: " + "; ".join(lines)

    async def probe(self, only: str | None = None) -> list[ClusterReport]:
        clusters = await anyio.to_thread.run_sync(self.clusters)
        prov = self.slurm_provisioner()
        reports: list[ClusterReport] = []

        async def one(cl: SlurmCluster) -> None:
            from skyd.transports.ssh import SSHTarget

            login = str(SSHTarget.from_dict(cl.ssh_dict()))
            try:
                with anyio.fail_after(PROBE_TIMEOUT_S):
                    parts = await prov.partitions(prov.transport(SSHTarget.from_dict(cl.ssh_dict())))
            except Exception as e:  # noqa: BLE001 - a report, not a crash
                msg = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
                reports.append(ClusterReport(cl.name, login, False, f"{cl.name} ({login}): unreachable: {msg}"))
                self._failed[cl.name] = time.monotonic()
                return
            self._failed.pop(cl.name, None)
            desc = ", ".join(
                p.name + (f" [{p.gres_type}:{p.gpus_per_node}/node -> {p.accelerator}]" if p.gpus_per_node else "")
                for p in parts)  # fmt: skip
            reports.append(ClusterReport(cl.name, login, True, f"{cl.name} ({login}): partitions {desc}",
                                         [p.to_dict() for p in parts]))  # fmt: skip

        async with anyio.create_task_group() as tg:
            for cl in clusters.values():
                if only is None or cl.name == only:
                    tg.start_soon(one, cl)
        good = {r.cluster: {"partitions": r.partitions, "probed_at": time.time()} for r in reports if r.ok}
        if good:
            await anyio.to_thread.run_sync(save_facts, good)
        return sorted(reports, key=lambda r: r.cluster)

    def dynamic_offerings(self) -> list[Offering]:
        try:
            clusters = self.clusters()
        except SkydError:
            return []
        facts = load_facts()
        now = time.monotonic()
        if any(c not in facts and now - self._failed.get(c, -1e9) > NEGATIVE_TTL_S for c in clusters):
            try:  # from the planner's worker thread: probe on the loop
                anyio.from_thread.run(self.probe)
            except RuntimeError:
                pass
            facts = load_facts()
        return offerings_from({c: f for c, f in facts.items() if c in clusters})

    def provisioner(self) -> Provisioner:
        return self.slurm_provisioner()

    def slurm_provisioner(self) -> SlurmProvisioner:
        if self._prov is None:
            from skyd.clouds.slurm.provisioner import SlurmProvisioner

            self._prov = SlurmProvisioner(config_path=self.config_path)
        return self._prov

    async def close(self) -> None:
        if self._prov is not None:
            await self._prov.close()
