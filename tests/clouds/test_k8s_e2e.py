"""`skyd launch` on Kubernetes end to end: a real daemon (network guard on), the real CLI,
two fake API servers (two kubeconfig contexts), pods whose exec runs in sandboxes on this
machine with real node agents. Launch → exec → logs → down; failover from a context where
the pod can never be scheduled; bad input with one message; nothing left behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from skyd.sdk.transport import Client
from tests.fakes.kubeapi import FakeKube, gpu_node
from tests.support.gcp import GEnv
from tests.support.kube import Kubes, kube_module_env, two_kubes
from tests.support.launches import failed_attempts, launch_events, request_events, submit_launch
from tests.support.pipeline import cli, write

TASK = "resources:\n  infra: k8s/a-lab\n  cpus: 2\nrun: echo hello-from-pod $SKYPILOT_NODE_RANK\n"
AMD = ("resources:\n  infra: k8s\n  accelerators: MI300X:8\n"
       "run: echo amd-rank-$SKYPILOT_NODE_RANK\n")


def _nodes(a: FakeKube, b: FakeKube) -> None:
    a.add_node(gpu_node("cpu-a", {}, cpu="16", memory="64Gi"))
    # a-lab's MI300X node is reserved for another team: the pod can never land there
    a.add_node(gpu_node("mi300-a", {"amd.com/gpu.device-id": "74a1"}, gpus={"amd.com/gpu": 8},
                        taints=[{"key": "dedicated", "value": "other-team", "effect": "NoSchedule"}]))
    b.add_node(gpu_node("mi300-b", {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"},
                        gpus={"amd.com/gpu": 8}))


@pytest.fixture(scope="module")
def kubes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubes]:
    with two_kubes(tmp_path_factory, _nodes) as k:
        yield k


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, kubes: Kubes) -> Iterator[GEnv]:
    with kube_module_env(tmp_path_factory, kubes) as e:
        yield e


def test_launch_exec_logs_down_on_pods(env: GEnv, kubes: Kubes, tmp_path: Path) -> None:
    a, _ = kubes
    y = write(tmp_path / "t.yaml", TASK.replace("cpus: 2", "cpus: 2\nnum_nodes: 2"))
    r = env.ok("launch", "-y", "-c", "k1", str(y), timeout=180)
    assert "hello-from-pod 0" in r.stdout and "hello-from-pod 1" in r.stdout, r.stdout
    row = env.status("k1")
    assert row is not None and row["status"] == "UP" and row["cloud"] == "kubernetes"
    assert len([x for x in a.live() if x.startswith("Pod/")]) == 2
    r = env.ok("exec", "k1", "echo exec-in-pod-$SKYPILOT_NODE_RANK")
    assert "exec-in-pod-0" in r.stdout and "exec-in-pod-1" in r.stdout, r.stdout
    r = env.ok("logs", "k1", "1")
    assert "hello-from-pod 0" in r.stdout, r.stdout
    env.ok("status", "-r")
    assert env.status("k1")["status"] == "UP"  # type: ignore[index]
    env.ok("down", "k1", "-y")
    assert a.live() == []


def test_never_schedulable_context_fails_over_at_once(env: GEnv, kubes: Kubes,
                                                      tmp_path: Path) -> None:
    a, b = kubes
    evs = launch_events(tmp_path, "kamd", AMD)
    assert evs[-1]["type"] == "result", "\n".join(str(e) for e in evs if e.get("type") != "log")
    failed = failed_attempts(evs)
    assert failed in ([], [("kubernetes/a-lab", "region")]), failed
    row = env.status("kamd")
    assert row is not None and row["region"] == "b-lab", row
    if failed:
        logs = " ".join(e.get("text", "") + e.get("error", "") for e in evs)
        assert "untolerated taint {dedicated: other-team}" in logs
    assert a.live() == [] and len(b.live("skyd-cluster")) == 2  # the pod and its service
    r = env.ok("exec", "kamd", "echo $SKYPILOT_NUM_GPUS_PER_NODE")
    env.ok("down", "kamd", "-y")
    assert b.live() == [], r.stdout


def test_bad_input_one_message_nothing_left(env: GEnv, kubes: Kubes, tmp_path: Path) -> None:
    a, b = kubes
    y = write(tmp_path / "bad.yaml", TASK.replace("k8s/a-lab", "k8s/nosuch"))
    r = cli("launch", "-y", "-c", "kbad", str(y), timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "nosuch" in r.stderr and "a-lab" in r.stderr, r.stderr
    a.bad_images = {"ghcr.io/none/such:1"}
    y = write(tmp_path / "img.yaml", TASK + "  image_id: docker:ghcr.io/none/such:1\n")
    y.write_text(TASK.replace("cpus: 2", "cpus: 2\n  image_id: docker:ghcr.io/none/such:1"))
    r = cli("launch", "-y", "-c", "kimg", str(y), timeout=120)
    a.bad_images = set()
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "ErrImagePull" in r.stderr and "ghcr.io/none/such:1" in r.stderr, r.stderr
    # an accelerator no node of any context has
    y = write(tmp_path / "h100.yaml", "resources:\n  infra: k8s\n  accelerators: H100:1\nrun: echo x\n")
    r = cli("launch", "-y", "-c", "kh100", str(y), timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "H100" in r.stderr, r.stderr
    assert a.live() == [] and b.live() == []


def test_status_refresh_sweeps_only_this_installs_orphans(env: GEnv, kubes: Kubes) -> None:
    import hashlib
    import socket

    a, _ = kubes
    mine = hashlib.sha256(f"{socket.gethostname()}:{env.home}".encode()).hexdigest()[:16]

    def ghost(name: str, owner: str) -> None:
        labels = {"skyd-cluster": name, "skyd-managed": "true", "skyd-owner": owner}
        a.services[("skyd", name)] = {"kind": "Service", "metadata": {"name": name, "namespace": "skyd",
                                                                      "labels": labels}, "spec": {}}

    ghost("ghost-mine", mine)
    ghost("ghost-theirs", "0123456789abcdef")  # another user's skyd in the same namespace
    r = env.ok("check")  # the daemon has the kubernetes provider loaded
    assert "a-lab: ok" in r.stdout and "b-lab: ok" in r.stdout, r.stdout
    env.ok("status", "-r")
    assert a.live() == ["Service/skyd/ghost-theirs"]
    a.services.clear()


def test_show_gpus_per_context(env: GEnv, kubes: Kubes) -> None:
    import json

    r = env.ok("show-gpus", "--infra", "k8s", "-o", "json")
    rows = {(x["context"], x["accelerator"]): (x["free"], x["total"]) for x in json.loads(r.stdout)}
    assert rows == {("a-lab", "MI300X"): (8, 8), ("b-lab", "MI300X"): (8, 8)}
    r = env.ok("show-gpus", "--infra", "k8s/b-lab")
    assert "b-lab" in r.stdout and "a-lab" not in r.stdout and "8 of 8 free" in r.stdout, r.stdout


def test_show_gpus_k8s_is_served_by_the_warm_daemon(env: GEnv, kubes: Kubes) -> None:
    """The daemon answers GET /v1/gpus/k8s[?context=]; the CLI asks it and never imports
    the kubernetes client itself (that import is most of a cold CLI's wall)."""
    import json
    import subprocess
    import sys

    rows = Client().get("/v1/gpus/k8s", {"context": "a-lab"})
    assert [(x["context"], x["accelerator"], x["free"]) for x in rows] == [("a-lab", "MI300X", 8)]
    code = ("import sys\nfrom skyd.cli.main import main\nrc = main(['show-gpus', '--infra', 'k8s',"
            " '-o', 'json'])\nprint('K8S-IMPORTED' if 'kubernetes_asyncio' in sys.modules else 'NO-K8S')\n"
            "sys.exit(rc)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out, _, marker = r.stdout.strip().rpartition("\n")
    assert marker == "NO-K8S", r.stdout
    assert {x["context"] for x in json.loads(out)} == {"a-lab", "b-lab"}


def test_kill9_while_pods_pend_then_restart_leaves_only_the_cluster(
    env: GEnv, kubes: Kubes, tmp_path: Path
) -> None:
    import json
    import sqlite3
    import time

    a, _ = kubes
    a.hold = True
    try:
        rid = submit_launch(tmp_path, "k9", TASK)
        deadline = time.monotonic() + 60
        while not [x for x in a.live() if x.startswith("Pod/")] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert a.live("skyd-cluster"), "the launch never created its pod"
        env.kill9_daemon()
    finally:
        a.hold = False
    env.start_daemon()
    evs = request_events(rid)
    assert evs[-1]["type"] == "result", evs[-3:]
    con = sqlite3.connect(f"file:{env.home / 'state.db'}?mode=ro", uri=True)
    try:
        (handle,) = con.execute("SELECT handle FROM clusters WHERE name = 'k9'").fetchone()
    finally:
        con.close()
    pods = {f"Pod/skyd/{n['instance_id']}" for n in json.loads(handle)["nodes"]}
    assert {x for x in a.live() if x.startswith("Pod/")} == pods
    env.ok("down", "k9", "-y")
    assert a.live() == []


def test_evicted_pods_read_as_preempted_and_nothing_is_left(env: GEnv, kubes: Kubes,
                                                           tmp_path: Path) -> None:
    a, _ = kubes
    y = write(tmp_path / "ev.yaml", TASK)
    env.ok("launch", "-y", "-c", "kev", str(y), timeout=180)
    (pod,) = [x.split("/")[-1] for x in a.live() if x.startswith("Pod/")]
    a.evict("skyd", pod)
    env.ok("status", "-r")
    assert env.status("kev") is None  # the provider said preempted: the cluster is gone
    assert a.live() == []
