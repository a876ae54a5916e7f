"""The provider contract on the fake `testcloud` (tests/fakes/testcloud): real HTTP to a
fake instances API on 127.0.0.1, real node agents; the half-made-cluster paths (`down`,
the leak pass) and the cached checks on a real store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from skyd.clouds.base import (
    NODE_RUNNING,
    NODE_STOPPED,
    NODE_TERMINATED,
    PartialHandle,
    ProvisionRequest,
    get_cloud,
    registered_clouds,
)
from skyd.clouds.catalog import IMPLEMENTED
from skyd.errors import CredentialsError, ResourcesUnavailableError
from tests.fakes.testcloud import PLUGIN
from tests.fakes.testcloud.cloud import TestProvisioner, catalog
from tests.fakes.testcloud.server import KEY, FakeInstancesAPI
from tests.support.launches import nothing_left_on

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeInstancesAPI]:
    a = FakeInstancesAPI(tmp_path_factory.mktemp("tcapi")).start()
    with nothing_left_on(a):
        yield a


@pytest.fixture
def tc(api: FakeInstancesAPI, skyd_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeInstancesAPI]:
    monkeypatch.setenv("SKYD_CLOUD_PLUGINS", PLUGIN)
    monkeypatch.setenv("SKYD_TESTCLOUD_URL", api.url)
    monkeypatch.setenv("SKYD_TESTCLOUD_KEY", KEY)
    api.clear_failures()
    yield api
    api.clear_failures()
    api.release()


@pytest.fixture
async def store(skyd_home: Path) -> AsyncIterator[Any]:
    from skyd.daemon.app import load_plugins
    from skyd.daemon.store import Store

    load_plugins()  # as the daemon does before it opens its store: every feature's tables
    st = Store(skyd_home / "state.db")
    await st.open()
    try:
        yield st
    finally:
        await st.close()


class Ctx:
    def __init__(self, store: Any) -> None:
        self.store = store
        self.lines: list[str] = []

    def log(self, line: str) -> None:
        self.lines.append(line)


def _req(name: str, zone: str = "r1-a", n: int = 1, **kw: Any) -> ProvisionRequest:
    off = next(o for o in catalog() if o.zone == zone)
    return ProvisionRequest(cluster_name=name, num_nodes=n, offering=off, use_spot=False,
                            token="tok-" + name, tag=f"{name}-t1", **kw)


async def test_lifecycle_with_real_agents(tc: FakeInstancesAPI) -> None:
    from skyd.nodeagent.client import AgentClient

    prov = TestProvisioner()
    req = _req("tcl", n=2, ports=("8080",), disk_size=100, image_id="img-1", labels=(("team", "a"),))
    handle = await prov.provision(req, lambda _: None)
    try:
        body = tc.creates[-1]
        assert (body["ports"], body["disk_size"], body["image_id"]) == (["8080"], 100, "img-1")
        assert body["labels"] == {"team": "a", "skyd-cluster": "tcl-t1"}
        assert handle.tag == "tcl-t1" and [n.rank for n in handle.nodes] == [0, 1]
        again = await prov.provision(req, lambda _: None)  # found again by tag: no new create
        assert tc.creates[-1] is body
        assert [n.instance_id for n in again.nodes] == [n.instance_id for n in handle.nodes]
        assert await prov.query(handle) == [NODE_RUNNING, NODE_RUNNING]
        for rank in (0, 1):
            host, port = await prov.agent_endpoint(handle, rank)
            assert host == "127.0.0.1"
            async with AgentClient(host, port, handle.token) as c:
                assert await c.health()
        await prov.open_ports(handle, ["9000"])
        assert all("9000" in i["ports"] for i in tc.live("tcl-t1"))
        await prov.stop(handle, lambda _: None)
        assert await prov.query(handle) == [NODE_STOPPED, NODE_STOPPED]
        handle = await prov.start(handle, lambda _: None)
        assert await prov.query(handle) == [NODE_RUNNING, NODE_RUNNING]
    finally:
        await prov.terminate(handle, lambda _: None)
        await prov.close()
    assert await prov.query(handle) == [NODE_TERMINATED, NODE_TERMINATED]
    assert tc.live("tcl-t1") == []


@pytest.mark.parametrize(("kind", "scope", "code"), [
    ("capacity", "zone", "InsufficientInstanceCapacity"),
    ("quota", "region", "QuotaExceeded"),
    ("outage", "cloud", "ServiceUnavailable"),
    ("invalid", "stop", "InvalidParameterValue"),
])
async def test_refusals_declare_their_scope(tc: FakeInstancesAPI, kind: str, scope: str, code: str) -> None:
    prov = TestProvisioner()
    tc.fail("r2", "r2-a", kind)
    try:
        with pytest.raises(ResourcesUnavailableError) as ei:
            await prov.provision(_req("tcs", zone="r2-a"), lambda _: None)
        assert ei.value.scope == scope
        assert ei.value.provider_message and code in ei.value.provider_message
        assert ei.value.no_failover is (scope == "stop")
    finally:
        await prov.close()


async def test_credentials_error_and_forget_by_tag(tc: FakeInstancesAPI) -> None:
    prov = TestProvisioner()
    try:
        tc.fail("r1", None, "auth")
        with pytest.raises(CredentialsError, match="refused the API key"):
            await prov.provision(_req("tca"), lambda _: None)
        tc.fail("r1", None, "capacity_after_create")  # the refusal leaves instances behind
        with pytest.raises(ResourcesUnavailableError):
            await prov.provision(_req("tcf"), lambda _: None)
        assert len(tc.live("tcf-t1")) == 1
        await prov.forget(PartialHandle("tcf", "testcloud", "r1", "r1-a", "tcf-t1"))
        assert tc.live("tcf-t1") == []
        assert tc.deletes[-1] == {"tag": "tcf-t1", "region": "r1", "zone": "r1-a"}
    finally:
        await prov.close()


async def test_addresses_must_be_loopback(tc: FakeInstancesAPI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKYD_TESTCLOUD_URL", "http://192.0.2.1:9")  # refused before connecting
    prov = TestProvisioner()
    with pytest.raises(ResourcesUnavailableError, match="not a loopback address") as ei:
        await prov.provision(_req("tcx"), lambda _: None)
    assert ei.value.scope == "stop"
    await prov.close()


async def test_registry_line_and_derived_lists(tc: FakeInstancesAPI) -> None:
    assert {"local", "ssh", "testcloud"} <= set(registered_clouds())
    cloud = get_cloud("testcloud")
    assert cloud.name == "testcloud" and "spot" in cloud.unsupported
    assert IMPLEMENTED["azure"] is False and IMPLEMENTED.get("local") is True


async def test_down_of_half_made_asks_only_its_cloud(tc: FakeInstancesAPI, store: Any, skyd_home: Path) -> None:
    from skyd.pipeline import clusters_db as cdb
    from skyd.pipeline.lifecycle import down_cluster

    prov = TestProvisioner()
    try:
        # An attempt that created instances, then its daemon died (no handle was saved).
        partial = PartialHandle("tch", "testcloud", "r1", "r1-b", "tch-t9")
        await cdb.insert_init(store, "tch", request_id="r", resources={}, num_nodes=1, partial=partial)
        await prov.call("POST", "/v1/instances", body={
            "tag": "tch-t9", "cluster": "tch", "region": "r1", "zone": "r1-b", "count": 1})
        sandbox = skyd_home / "local" / "tch"  # what `local` would remove for this name
        sandbox.mkdir(parents=True)
        row = await cdb.get_cluster(store, "tch")
        assert row is not None and cdb.partial_of(row) == partial and row["status"] == cdb.INIT
        ctx = Ctx(store)
        await down_cluster(ctx, "tch")
        assert tc.live("tch-t9") == [] and tc.deletes[-1]["zone"] == "r1-b"
        assert sandbox.exists()  # the local infra was not asked
        assert await cdb.get_cluster(store, "tch") is None
    finally:
        await prov.close()


async def test_leak_pass_and_check_cache(tc: FakeInstancesAPI, store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from skyd.clouds.base import close_clouds
    from skyd.pipeline import cloudcheck, leaks
    from skyd.pipeline import clusters_db as cdb
    from skyd.pipeline.locks import cluster_lock

    prov = TestProvisioner()
    try:
        for name in ("tlk1", "tlk2"):
            await cdb.insert_init(store, name, request_id="r", resources={}, num_nodes=1,
                                  partial=PartialHandle(name, "testcloud", "r2", "r2-b", f"{name}-t"))
            await prov.call("POST", "/v1/instances", body={
                "tag": f"{name}-t", "cluster": name, "region": "r2", "zone": "r2-b", "count": 1})
        async with cluster_lock("tlk2"):  # a launch in flight holds it: not a leak
            assert await leaks.leak_pass(store) == ["tlk1"]
        assert tc.live("tlk1-t") == [] and len(tc.live("tlk2-t")) == 1
        assert await leaks.leak_pass(store) == ["tlk2"]
        assert tc.live("tlk2-t") == [] and await cdb.half_made(store) == []

        first = await cloudcheck.checks(store, ["testcloud"])
        assert first["testcloud"].ok and not first["testcloud"].cached
        again = await cloudcheck.checks(store, ["testcloud"])
        assert again["testcloud"].cached and again["testcloud"].checked_at == first["testcloud"].checked_at
        monkeypatch.setenv("SKYD_TESTCLOUD_KEY", "wrong")
        assert (await cloudcheck.checks(store, ["testcloud"]))["testcloud"].ok  # cache is fresh
        bad = await cloudcheck.checks(store, ["testcloud"], refresh=True)
        assert not bad["testcloud"].ok and "refused the API key" in bad["testcloud"].reason
    finally:
        await prov.close()
        await close_clouds()


async def test_managed_job_teardown_of_half_made_cluster(tc: FakeInstancesAPI, store: Any) -> None:
    from skyd.jobs.pipeline_ops import PipelineClusterOps
    from skyd.pipeline import clusters_db as cdb

    prov = TestProvisioner()
    try:
        partial = PartialHandle("tcj", "testcloud", "r3", "r3-a", "tcj-t")
        await cdb.insert_init(store, "tcj", request_id="j", resources={}, num_nodes=1, partial=partial)
        await prov.call("POST", "/v1/instances", body={
            "tag": "tcj-t", "cluster": "tcj", "region": "r3", "zone": "r3-a", "count": 1})
        await PipelineClusterOps(store).teardown_locked("tcj")
        assert tc.live("tcj-t") == [] and await cdb.get_cluster(store, "tcj") is None
    finally:
        await prov.close()


async def test_status_refresh_runs_the_leak_pass(tc: FakeInstancesAPI, store: Any) -> None:
    from skyd.pipeline import clusters_db as cdb
    from skyd.pipeline.verbs import _refresh  # POST /v1/status/refresh (`skyd status -r`)

    class ReadCtx:
        def __init__(self) -> None:
            self.store = store
            self.body = {"clusters": ["tcr"]}

    prov = TestProvisioner()
    try:
        await cdb.insert_init(store, "tcr", request_id="r", resources={}, num_nodes=1,
                              partial=PartialHandle("tcr", "testcloud", "r1", "r1-a", "tcr-t"))
        await prov.call("POST", "/v1/instances", body={
            "tag": "tcr-t", "cluster": "tcr", "region": "r1", "zone": "r1-a", "count": 1})
        assert await _refresh(ReadCtx(), None) == []
        assert tc.live("tcr-t") == [] and await cdb.get_cluster(store, "tcr") is None
    finally:
        await prov.close()


async def test_a_task_pinned_to_its_infras_asks_only_those_providers(
        tc: FakeInstancesAPI, store: Any) -> None:
    """A task whose every resource entry names its infra is planned without probing any
    other provider: `infra: local` never waits on a cloud's credential check (the cached
    checks hold `local` alone). A task that names no infra asks every provider."""
    from skyd.clouds.base import close_clouds
    from skyd.models.dag import Dag
    from skyd.models.loader import task_from_config
    from skyd.pipeline import planner

    async def checked() -> set[str]:
        return {r["cloud"] for r in await store.fetchall("SELECT cloud FROM cloud_checks")}

    try:
        pinned = task_from_config({"resources": {"infra": "local"}, "run": "true"})
        choices = await planner.plan_task(pinned, blocked=[], store=store)
        assert {c.offering.cloud for c in choices} == {"local"}
        assert await checked() == {"local"}
        doc = await planner.dryrun(Dag([pinned]), store=store)
        assert "testcloud" not in str(doc.get("table")) and await checked() == {"local"}

        free = task_from_config({"resources": {"cpus": "1+"}, "run": "true"})
        await planner.plan_task(free, blocked=[], store=store)
        assert {"local", "testcloud"} <= await checked()
    finally:
        await close_clouds()
