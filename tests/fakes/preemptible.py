"""A fake preemptible provider: `fakecloud`, regions r1..r3 x zones a/b, spot and on-demand.

Its nodes are local sandboxes with real node agents (composition over
skyd.clouds.local.LocalProvisioner); knobs a test (or bench/) turns:

- `refuse_capacity(region=, zone=)`: provisioning there raises ResourcesUnavailableError
  (with `scope` = "zone" or "region", as the pipeline's failover reads it);
- `fail_next(n)`: the next n provisioning calls fail (anywhere);
- `await preempt(cluster)`: SIGKILL the cluster's agents and every process of its jobs, and
  report NODE_PREEMPTED for its nodes until it is terminated.

Register with `install()` (registers the cloud under "fakecloud"; idempotent).

Across processes (a test driving a daemon subprocess): load this module into the daemon
with ``SKYD_EXTRA_PLUGINS=tests.fakes.preemptible`` and turn the knobs through the file
``$SKYD_HOME/fakecloud-knobs.json`` (`write_knobs(refused=[[region, zone]], fail_next=n)`;
``[region, zone, "spot"]`` refuses only spot capacity there),
which the provisioner reads on every provision; `preempt` works from any process (it kills
by /proc and leaves a marker file in the cluster's directory).
"""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path
from typing import Any

import anyio

from skyd.clouds.base import (
    NODE_PREEMPTED,
    Cloud,
    ClusterHandle,
    LogFn,
    Provisioner,
    ProvisionRequest,
    register_cloud,
)
from skyd.clouds.offering import Offering
from skyd.errors import ResourcesUnavailableError

NAME = "fakecloud"
PREEMPTED_MARK = "PREEMPTED"
REGIONS = ("r1", "r2", "r3")
ZONES = ("a", "b")


def catalog() -> list[Offering]:
    out = []
    for i, r in enumerate(REGIONS):
        f = 1.0 + 0.1 * i  # r1 cheapest, then r2, r3
        for z in ZONES:
            zone = f"{r}-{z}"
            out.append(Offering(NAME, "fk-cpu-2", None, 0, 2, 4, r, zone,
                                round(0.10 * f, 4), round(0.03 * f, 4)))  # fmt: skip
            out.append(Offering(NAME, "fk-gpu-1", "A100", 1, 8, 32, r, zone,
                                round(2.00 * f, 4), round(0.60 * f, 4), 40))  # fmt: skip
    return out


def _procs_under(d: Path) -> list[int]:
    """Pids of the sandbox's agent and jobs: stdout (agent.log, the job's log file) or cwd
    inside d. (Jobs may run with cwd = the real HOME, so stdout is the reliable mark.)"""
    root = str(d.resolve()) + os.sep
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            marks = [os.readlink(p / "cwd") + os.sep, os.readlink(p / "fd" / "1")]
        except OSError:
            continue
        if any(m.startswith(root) for m in marks):
            pids.append(int(p.name))
    return pids


def _kill_all(d: Path) -> int:
    n = 0
    for pid in _procs_under(d):
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
        except (ProcessLookupError, PermissionError):
            continue
    return n


class PreemptibleProvisioner(Provisioner):
    def __init__(self, inner: Provisioner | None = None, root: Path | None = None) -> None:
        if inner is None:
            from skyd.clouds.local import LocalProvisioner

            inner = LocalProvisioner(root, cloud_name=NAME)
        self.inner = inner
        self.refused: list[tuple[str | None, str | None]] = []
        self.failures_left = 0
        self.provisioned: list[tuple[str, str, str | None]] = []  # (cluster, region, zone)
        self.preempted: set[str] = set()

    # -- knobs ----------------------------------------------------------------------------

    def refuse_capacity(self, region: str | None = None, zone: str | None = None) -> None:
        self.refused.append((region, zone))

    def restore_capacity(self) -> None:
        self.refused.clear()

    def fail_next(self, n: int) -> None:
        self.failures_left = n

    def _cluster_dir(self, cluster: str) -> Path | None:
        fn = getattr(self.inner, "cluster_dir", None)
        return Path(fn(cluster)) if fn else None

    async def preempt(self, cluster: str) -> int:
        """Kill the cluster's agents and jobs; it reports NODE_PREEMPTED from now on."""
        self.preempted.add(cluster)
        d = self._cluster_dir(cluster)
        if d is None or not d.exists():
            return 0
        (d / PREEMPTED_MARK).write_text("preempted\n")
        return await anyio.to_thread.run_sync(_kill_all, d)

    def is_preempted(self, cluster: str) -> bool:
        d = self._cluster_dir(cluster)
        return cluster in self.preempted or bool(d and (d / PREEMPTED_MARK).exists())

    # -- Provisioner ----------------------------------------------------------------------

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        off = req.offering
        knobs = read_knobs()
        if knobs.get("fail_next"):
            self.failures_left += int(knobs["fail_next"])
            write_knobs(refused=knobs.get("refused", []), fail_next=0)
        refused = list(self.refused) + [tuple(x) for x in knobs.get("refused", [])]
        for region, zone, *kind in refused:  # kind ["spot"]: only spot capacity is short
            if kind and kind[0] == "spot" and not req.use_spot:
                continue
            if (region is None or region == off.region) and (zone is None or zone == off.zone):
                raise ResourcesUnavailableError(
                    f"{NAME}/{off.region}/{off.zone}: insufficient capacity for {off.instance_type}"
                    f" ({'spot' if req.use_spot else 'on-demand'})",
                    scope="zone" if zone else "region",
                )
        if self.failures_left > 0:
            self.failures_left -= 1
            raise ResourcesUnavailableError(
                f"{NAME}/{off.region}/{off.zone}: provisioning failed (injected)", scope="zone")
        if self.is_preempted(req.cluster_name):  # remains of a preempted cluster go first
            d = self._cluster_dir(req.cluster_name)
            if d is not None:
                import shutil

                from skyd.transports.fuse import fuse_mounts_under, unmount_under

                await unmount_under(d, wait=False)  # never delete through a bucket mount
                left = fuse_mounts_under(d)
                if left:
                    raise RuntimeError(f"fakecloud: still mounted under {d}: {left}")
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(d, ignore_errors=True))
            self.preempted.discard(req.cluster_name)
        handle = await self.inner.provision(req, log)
        handle.cloud = NAME
        self.provisioned.append((req.cluster_name, off.region, off.zone))
        return handle

    async def query(self, handle: ClusterHandle) -> list[str]:
        if self.is_preempted(handle.cluster_name):
            return [NODE_PREEMPTED] * len(handle.nodes)
        return await self.inner.query(handle)

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        await self.inner.stop(handle, log)

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        return await self.inner.start(handle, log)

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        if self.is_preempted(handle.cluster_name):
            return handle  # a preempted node does not come back
        return await self.inner.ensure_agents(handle, log)

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        await self.inner.terminate(handle, log)
        self.preempted.discard(handle.cluster_name)

    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        return await self.inner.agent_endpoint(handle, rank)

    async def sync_dir(
        self, handle: ClusterHandle, rank: int, src: str, dst: str, excludes: list[str]
    ) -> tuple[int, int]:
        return await self.inner.sync_dir(handle, rank, src, dst, excludes)

    def node_shell(self, handle: ClusterHandle, rank: int) -> Any:
        return self.inner.node_shell(handle, rank)

    async def close(self) -> None:
        await self.inner.close()


class FakePreemptibleCloud(Cloud):
    name = NAME
    egress_tiers = ((math.inf, 0.10),)
    inter_region_per_gb = None
    minimum_billing_minutes = 0.0
    gpu_ids = ()
    unsupported: frozenset[str] = frozenset()

    def __init__(self, provisioner: PreemptibleProvisioner | None = None) -> None:
        self._prov = provisioner or PreemptibleProvisioner()

    async def check(self) -> tuple[bool, str]:
        return True, "fake preemptible provider (tests)"

    def dynamic_offerings(self) -> list[Offering]:
        return catalog()

    def provisioner(self) -> PreemptibleProvisioner:
        return self._prov


def knobs_file() -> Path:
    from skyd import paths

    return paths.home() / "fakecloud-knobs.json"


def read_knobs() -> dict[str, Any]:
    import json

    try:
        return dict(json.loads(knobs_file().read_text()))
    except (OSError, ValueError):
        return {}


def write_knobs(*, refused: list[Any] | None = None, fail_next: int = 0) -> None:
    import json

    f = knobs_file()
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps({"refused": refused or [], "fail_next": fail_next}))
    tmp.replace(f)


def install(provisioner: PreemptibleProvisioner | None = None) -> FakePreemptibleCloud:
    """Register `fakecloud` (a fresh instance each call) and return it."""
    from skyd.clouds.base import get_cloud

    register_cloud(NAME, lambda: FakePreemptibleCloud(provisioner))
    cloud = get_cloud(NAME)
    assert isinstance(cloud, FakePreemptibleCloud)
    return cloud


if os.environ.get("SKYD_EXTRA_PLUGINS", "").find("tests.fakes.preemptible") >= 0:
    # Loaded as a daemon plugin: make `fakecloud` launchable in that daemon.
    register_cloud(NAME, FakePreemptibleCloud)
