"""The kubernetes provider against the fake API server (tests/fakes/kubeapi.py): pods and a
headless service per cluster, node agents in the pods over the exec transport, scheduling
failover, bad input, and nothing left behind."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from skyd.clouds.base import NODE_PREEMPTED, NODE_RUNNING, ProvisionRequest
from skyd.clouds.kubernetes.cloud import KubernetesCloud
from skyd.clouds.offering import Offering
from skyd.errors import InvalidSpecError, ResourcesUnavailableError
from tests.fakes.kubeapi import FakeKube, gpu_node
from tests.fakes.netguard import sitecustomize as netguard

pytestmark = pytest.mark.anyio

NODES = [
    gpu_node("cpu-1", {}, cpu="8", memory="32Gi"),
    gpu_node("h100-1", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, gpus={"nvidia.com/gpu": 8},
             taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
    gpu_node("mi300-1", {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}, gpus={"amd.com/gpu": 8}),
    gpu_node("mi325-1", {"beta.amd.com/gpu.device-id.74a5": "8"}, gpus={"amd.com/gpu": 8}),
    gpu_node("l4-1", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, gpus={"nvidia.com/gpu": 1},
             taints=[{"key": "dedicated", "value": "ml-team", "effect": "NoSchedule"}]),
]


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKube]:
    k = FakeKube(tmp_path_factory.mktemp("kube")).start()
    for n in NODES:
        k.add_node(n)
    try:
        yield k
    finally:
        k.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("k8shome")  # one SKYD_HOME: the agent zipapp is built once


@pytest.fixture
async def cloud(kube: FakeKube, home: Path, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[KubernetesCloud]:
    netguard.install()
    cfg = kube.kubeconfig(tmp_path / "kubeconfig", {"lab": "skyd", "locked": "prod"},
                          servers={"dead": "http://127.0.0.1:9"})
    monkeypatch.setenv("KUBECONFIG", str(cfg))
    monkeypatch.setenv("SKYD_HOME", str(home))
    monkeypatch.setenv("SKYD_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SKYD_K8S_POLL_S", "0.1")
    kube.forbidden, kube.bad_images = {"prod"}, set()
    before = len(netguard.VIOLATIONS)
    c = KubernetesCloud()
    try:
        yield c
    finally:
        await c.close()
    assert netguard.VIOLATIONS[before:] == []
    assert kube.live() == [], kube.live()


def _req(name: str, itype: str = "2CPU--4GB", ctx: str = "lab", *, n: int = 1, acc: str | None = None,
         count: float = 0, **kw: Any) -> ProvisionRequest:
    off = Offering("kubernetes", itype, acc, count, 2, 4, ctx, None, 0.0, 0.0)
    return ProvisionRequest(cluster_name=name, num_nodes=n, offering=off, use_spot=False,
                            token="tok-" + name, tag=f"{name}-abc123", **kw)


async def _healthy(cloud: KubernetesCloud, handle: Any) -> bool:
    from skyd.nodeagent.client import AgentClient

    for rank in range(len(handle.nodes)):
        host, port = await cloud.provisioner().agent_endpoint(handle, rank)
        assert host == "127.0.0.1"
        async with AgentClient(host, port, handle.token) as c:
            if not await c.health(timeout=10):
                return False
    return True


async def test_two_pod_cluster_runs_agents_over_exec_then_down_leaves_nothing(
    cloud: KubernetesCloud, kube: FakeKube, tmp_path: Path
) -> None:
    prov = cloud.provisioner()
    h = await prov.provision(_req("web", n=2, ports=("8080",), labels=(("team", "ml"),),
                                  user="jane@corp"), print)
    assert [n.instance_id for n in h.nodes] == ["web-abc123-0", "web-abc123-1"]
    assert kube.live("skyd-cluster") == ["Pod/skyd/web-abc123-0", "Pod/skyd/web-abc123-1",
                                         "Service/skyd/web-abc123", "Service/skyd/web-abc123-ports"]
    pod = kube.pods[("skyd", "web-abc123-0")]
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert pod["metadata"]["labels"]["skypilot-user"] == "jane-corp"  # a valid label value
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2000m", "memory": "4096Mi"}
    assert await _healthy(cloud, h)
    assert await prov.query(h) == [NODE_RUNNING, NODE_RUNNING]
    # commands, files (tar over exec) and a secret written with its mode
    src = tmp_path / "wd"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("hello")
    (src / "skip.log").write_text("x")
    files, size = await prov.sync_dir(h, 1, str(src) + "/", "workdir", ["*.log"])
    assert (files, size) == (1, 5)
    t = await prov.transport("lab", "skyd", "web-abc123-1")
    res = await t.run(["cat", f"{h.nodes[1].node_dir}/workdir/sub/a.txt"])
    assert res.ok and res.stdout == "hello"
    assert not (await t.run(f"test -e {h.nodes[1].node_dir}/workdir/skip.log")).ok
    await t.write_file(f"{h.nodes[1].node_dir}/secret", b"s3cret", mode=0o600)
    res = await t.run(f"stat -c %a {h.nodes[1].node_dir}/secret; cat {h.nodes[1].node_dir}/secret")
    assert res.stdout.split() == ["600", "s3cret"]
    assert (await t.run("exit 3")).exit_status == 3
    assert (await t.run("cat", input="piped")).stdout == "piped"
    await prov.terminate(h, print)
    assert kube.live() == []


async def test_evicted_pod_is_preempted(cloud: KubernetesCloud, kube: FakeKube) -> None:
    prov = cloud.provisioner()
    h = await prov.provision(_req("ev"), print)
    kube.evict("skyd", "ev-abc123-0")
    assert await prov.query(h) == [NODE_PREEMPTED]
    assert kube.live() == []  # the evicted pod and the service went with the cluster


async def test_agent_repair_after_the_agent_dies(cloud: KubernetesCloud, kube: FakeKube) -> None:
    prov = cloud.provisioner()
    h = await prov.provision(_req("rep"), print)
    t = await prov.transport("lab", "skyd", "rep-abc123-0")
    nd = h.nodes[0].node_dir
    await t.run(f"kill -9 $({t.python} -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"pid\"])' "
                f"{nd}/agent.json)", check=True)
    from skyd.transports import agent_deploy

    assert not await agent_deploy.healthy(t, prov._site(h.nodes[0], h.cluster_name), h.token)
    h = await prov.ensure_agents(h, print)
    assert await _healthy(cloud, h)
    await prov.terminate(h, print)


async def test_gpu_pod_gets_vendor_key_affinity_and_toleration(cloud: KubernetesCloud, kube: FakeKube) -> None:
    prov = cloud.provisioner()
    h = await prov.provision(_req("amd", "16CPU--64GB--MI325X:8", acc="MI325X", count=8), print)
    pod = kube.pods[("skyd", "amd-abc123-0")]
    assert pod["spec"]["nodeName"] == "mi325-1"
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"amd.com/gpu": "8"}
    assert c["image"].startswith("rocm/")
    await prov.terminate(h, print)


@pytest.mark.parametrize(("itype", "acc", "count", "needle"), [
    # no node could ever hold 16 AMD GPUs: fail at once with the scheduler's reason
    ("16CPU--64GB--MI300X:16", "MI300X", 16, "Insufficient amd.com/gpu"),
    # the only L4 node carries a taint the pod does not tolerate
    ("4CPU--8GB--L4:1", "L4", 1, "untolerated taint {dedicated: ml-team}"),
])
async def test_never_schedulable_fails_the_context_at_once(
    cloud: KubernetesCloud, kube: FakeKube, itype: str, acc: str, count: int, needle: str
) -> None:
    prov = cloud.provisioner()
    t0 = time.monotonic()
    req = _req("nope", itype, acc=acc, count=count)
    with pytest.raises(ResourcesUnavailableError) as ei:
        await prov.provision(req, print)
    assert time.monotonic() - t0 < 10
    assert ei.value.scope == "region" and needle in str(ei.value.provider_message)
    assert "0/5 nodes are available" in str(ei.value.provider_message)
    await prov.forget(req.partial())


async def test_capacity_pending_waits_up_to_the_bound(
    cloud: KubernetesCloud, kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    prov = cloud.provisioner()
    held = await prov.provision(_req("big", "30CPU--100GB", n=2), print)  # both untainted big nodes
    monkeypatch.setenv("SKYD_K8S_PENDING_TIMEOUT_S", "1")
    req = _req("wait", "30CPU--100GB")  # fits a node "big" holds now
    t0 = time.monotonic()
    with pytest.raises(ResourcesUnavailableError) as ei:
        await prov.provision(req, print)
    assert time.monotonic() - t0 >= 1.0
    assert "pending for capacity" in str(ei.value) and ei.value.scope == "region"
    await prov.forget(req.partial())
    await prov.terminate(held, print)


async def test_image_pull_error_names_the_image(cloud: KubernetesCloud, kube: FakeKube) -> None:
    kube.bad_images = {"no/such:image"}
    prov = cloud.provisioner()
    req = _req("pull", image_id="docker:no/such:image")
    with pytest.raises(ResourcesUnavailableError) as ei:
        await prov.provision(req, print)
    assert ei.value.scope == "stop"
    assert "ErrImagePull" in str(ei.value) and "no/such:image" in str(ei.value)
    await prov.forget(req.partial())


async def test_bad_contexts(cloud: KubernetesCloud, kube: FakeKube) -> None:
    prov = cloud.provisioner()
    with pytest.raises(InvalidSpecError) as ei:
        cloud.validate_location("nosuch", None)
    assert "lab" in str(ei.value.hint)
    req = _req("rbac", ctx="locked")
    with pytest.raises(ResourcesUnavailableError) as e2:
        await prov.provision(req, print)
    assert e2.value.scope == "region" and "forbidden" in str(e2.value.provider_message)
    ok, why = await cloud.check()
    assert ok and "lab: ok" in why and "locked: unavailable (forbidden" in why
    assert "MI300X 8/8" in why and "H100 8/8" in why


async def test_unreachable_api_server(cloud: KubernetesCloud, kube: FakeKube, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = kube.kubeconfig(tmp_path / "kc2", {"dead": "default"}, servers={"dead": "http://127.0.0.1:9"})
    monkeypatch.setenv("KUBECONFIG", str(cfg))
    c = KubernetesCloud()
    try:
        ok, why = await c.check()
        assert not ok and "dead: unavailable (" in why and "unreachable" in why
        with pytest.raises(ResourcesUnavailableError) as ei:
            await c.provisioner().provision(_req("x", ctx="dead"), print)
        assert ei.value.scope == "region" and "unreachable" in str(ei.value)
    finally:
        await c.close()


async def test_offerings_and_gpu_table(cloud: KubernetesCloud, kube: FakeKube) -> None:
    await cloud.refresh()
    offs = [o for o in cloud.dynamic_offerings() if o.region == "lab"]
    accs = {(o.accelerator, o.accelerator_count) for o in offs if o.accelerator}
    assert {("H100", 8), ("MI300X", 8), ("MI325X", 8), ("L4", 1), ("H100", 1)} <= accs
    rows = [r for r in await cloud.gpu_table() if r["context"] == "lab"]
    assert {r["accelerator"]: (r["free"], r["total"]) for r in rows} == {
        "H100": (8, 8), "L4": (1, 1), "MI300X": (8, 8), "MI325X": (8, 8)}


async def test_spot_lands_only_on_spot_nodes(cloud: KubernetesCloud, kube: FakeKube) -> None:
    from skyd.clouds.kubernetes.cloud import offerings_for
    from skyd.clouds.kubernetes.inventory import build

    spot_node = gpu_node("spot-1", {"cloud.google.com/gke-spot": "true", "nvidia.com/gpu.product": "NVIDIA-L4"},
                         gpus={"nvidia.com/gpu": 4},
                         taints=[{"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}])
    nodes = build({"items": [*NODES, spot_node]}, {"items": []})
    offs = {(o.accelerator, o.accelerator_count): o for o in offerings_for("lab", nodes)}
    assert offs[("L4", 1)].spot_price == 0.0 and offs[("MI300X", 8)].spot_price is None
    assert all(o.spot_price is None for o in offerings_for("lab", nodes, allow_spot=False))
    kube.add_node(spot_node)
    try:
        prov = cloud.provisioner()
        r = _req("sp", "4CPU--8GB--L4:1", acc="L4", count=1)
        r = ProvisionRequest(**{**r.__dict__, "use_spot": True})
        h = await prov.provision(r, print)
        assert kube.pods[("skyd", "sp-abc123-0")]["spec"]["nodeName"] == "spot-1"
        await prov.terminate(h, print)
        # on demand, the pod does not tolerate the spot taint: only the tainted L4 nodes are left
        r2 = _req("od", "4CPU--8GB--L4:1", acc="L4", count=1)
        with pytest.raises(ResourcesUnavailableError):
            await prov.provision(r2, print)
        await prov.forget(r2.partial())
    finally:
        kube.nodes.pop("spot-1")


def test_namespace_from_the_context_or_config(kube: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from skyd.clouds.kubernetes import config

    cfg = kube.kubeconfig(tmp_path / "kc", {"a": "team-a", "b": ""})
    monkeypatch.setenv("KUBECONFIG", str(cfg))
    monkeypatch.setenv("SKYD_CONFIG_DIR", str(tmp_path / "conf"))
    assert {c.name: c.namespace for c in config.load_contexts()[0]} == {"a": "team-a", "b": "default"}
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text(
        "kubernetes:\n  namespace: ml\n  allowed_contexts: [b]\n")
    assert {c.name: c.namespace for c in config.load_contexts()[0]} == {"b": "ml"}
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert config.load_contexts() == ([], f"no kubeconfig at {tmp_path / 'missing'}")


async def test_exec_over_v5_closes_stdin(cloud: KubernetesCloud, kube: FakeKube, tmp_path: Path) -> None:
    kube.protocols = ("v5.channel.k8s.io", "v4.channel.k8s.io")
    try:
        prov = cloud.provisioner()
        h = await prov.provision(_req("v5"), print)
        t = await prov.transport("lab", "skyd", "v5-abc123-0")
        src = tmp_path / "blob"
        src.write_bytes(bytes(range(256)) * 4096)
        await t.put(src, f"{h.nodes[0].node_dir}/blob")
        await t.get(f"{h.nodes[0].node_dir}/blob", tmp_path / "back")
        assert (tmp_path / "back").read_bytes() == src.read_bytes()
        assert await _healthy(cloud, h)
        await prov.terminate(h, print)
    finally:
        kube.protocols = ("v4.channel.k8s.io",)
