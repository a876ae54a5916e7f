"""The fake preemptible provider (tests/fakes/preemptible.py): knobs, and real agents."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from skyd.clouds.base import NODE_PREEMPTED, NODE_RUNNING, NODE_TERMINATED, ProvisionRequest
from skyd.errors import ResourcesUnavailableError
from tests.fakes.preemptible import NAME, PreemptibleProvisioner, catalog, install

pytestmark = pytest.mark.anyio


def _req(cluster: str, region: str = "r1", zone: str = "r1-a") -> ProvisionRequest:
    off = next(o for o in catalog() if o.region == region and o.zone == zone and o.accelerator is None)
    return ProvisionRequest(cluster_name=cluster, num_nodes=1, offering=off, use_spot=True, token="tok-123")


def test_catalog_and_registration() -> None:
    cloud = install()
    offs = cloud.dynamic_offerings()
    assert {(o.region, o.zone) for o in offs} == {(f"r{r}", f"r{r}-{z}") for r in (1, 2, 3) for z in "ab"}
    assert all(o.spot_price is not None and o.price is not None and o.spot_price < o.price for o in offs)
    r1 = min(o.spot_price or 0 for o in offs if o.region == "r1")
    r3 = min(o.spot_price or 0 for o in offs if o.region == "r3")
    assert r1 < r3 and anyio.run(cloud.check)[0] and cloud.name == NAME


async def test_capacity_knobs_raise_with_scope(tmp_path: Path) -> None:
    prov = PreemptibleProvisioner(root=tmp_path)
    prov.refuse_capacity(region="r1")
    with pytest.raises(ResourcesUnavailableError, match="insufficient capacity") as e:
        await prov.provision(_req("c1"), print)
    assert getattr(e.value, "scope", None) == "region"
    prov.restore_capacity()
    prov.refuse_capacity(zone="r1-a")
    with pytest.raises(ResourcesUnavailableError) as e:
        await prov.provision(_req("c1"), print)
    assert getattr(e.value, "scope", None) == "zone"
    prov.restore_capacity()
    prov.fail_next(2)
    for _ in range(2):
        with pytest.raises(ResourcesUnavailableError, match="injected"):
            await prov.provision(_req("c1", "r2", "r2-b"), print)
    assert prov.failures_left == 0 and prov.provisioned == []


async def test_preempt_kills_real_agent_and_jobs(skyd_home: Path) -> None:
    from skyd.nodeagent.client import AgentClient

    prov = PreemptibleProvisioner(root=skyd_home / "fake")
    handle = await prov.provision(_req("pc", "r2", "r2-b"), lambda s: None)
    try:
        assert handle.cloud == NAME and handle.zone == "r2-b"
        assert await prov.query(handle) == [NODE_RUNNING]
        host, port = await prov.agent_endpoint(handle, 0)
        async with AgentClient(host, port, handle.token) as c:
            pidfile = skyd_home / "fake" / "pc" / "job.pid"
            jid = await c.submit_job({"run": f"echo $$ > {pidfile}; sleep 60", "name": "long"})
            with anyio.fail_after(15):
                while True:
                    q = await c.job_queue(job_ids=[jid])
                    if q and q[0]["status"] == "RUNNING":
                        break
                    await anyio.sleep(0.1)
        with anyio.fail_after(10):
            while not pidfile.exists() or not pidfile.read_text().strip():
                await anyio.sleep(0.1)
        job_pid = int(pidfile.read_text())
        assert await prov.preempt("pc") >= 2  # the agent and the job (at least)
        assert await prov.query(handle) == [NODE_PREEMPTED]
        with anyio.fail_after(5):
            while _alive(job_pid):
                await anyio.sleep(0.05)
        assert await prov.ensure_agents(handle, lambda s: None) is handle  # stays down
        # Relaunching the same name in another zone clears the preempted remains.
        h2 = await prov.provision(_req("pc", "r3", "r3-a"), lambda s: None)
        assert await prov.query(h2) == [NODE_RUNNING] and h2.zone == "r3-a"
    finally:
        await prov.terminate(handle, lambda s: None)
    assert await prov.query(handle) == [NODE_TERMINATED]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
