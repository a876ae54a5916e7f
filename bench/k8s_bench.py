"""Kubernetes provider on the fake API server (tests/fakes/kubeapi.py), in this process.

- launch of an 8-pod cluster: wall time and API calls (REST + exec sessions), agents started
  in every pod over exec;
- scheduling-failure detection: pod created -> ResourcesUnavailableError (the point where the
  pipeline plans the next candidate), for a pod no node can ever hold;
- show-gpus over 3 contexts x 200 nodes (with 600 GPU pods held), in-process and the CLI
  (which asks the daemon, started on its first call).

Run: .venv/bin/python bench/k8s_bench.py [-n 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skyd.clouds.base import ProvisionRequest  # noqa: E402
from skyd.clouds.offering import Offering  # noqa: E402
from skyd.errors import ResourcesUnavailableError  # noqa: E402
from tests.fakes.kubeapi import FakeKube, gpu_node  # noqa: E402


def fmt(name: str, xs: list[float], unit: str = "ms") -> str:
    return (f"{name}: median {statistics.median(xs):.0f} {unit} (min {min(xs):.0f}, max {max(xs):.0f}, "
            f"n={len(xs)})")


def req(name: str, itype: str, n: int, acc: str | None = None, count: float = 0) -> ProvisionRequest:
    off = Offering("kubernetes", itype, acc, count, 1, 2, "lab", None, 0.0, 0.0)
    return ProvisionRequest(cluster_name=name, num_nodes=n, offering=off, use_spot=False,
                            token="tok", tag=f"{name}-b")


async def launches(kube: FakeKube, runs: int) -> None:
    from skyd.clouds.kubernetes.cloud import KubernetesCloud

    walls, calls, execs = [], [], []
    for i in range(runs):
        cloud = KubernetesCloud()
        prov = cloud.provisioner()
        c0, e0 = sum(kube.calls.values()), kube.exec_calls
        t0 = time.perf_counter()
        h = await prov.provision(req(f"b{i}", "1CPU--2GB", 8), lambda s: None)
        walls.append((time.perf_counter() - t0) * 1000)
        calls.append(sum(kube.calls.values()) - c0 - (kube.exec_calls - e0))
        execs.append(kube.exec_calls - e0)
        await prov.terminate(h, lambda s: None)
        await cloud.close()
    print(fmt("8-pod launch (pods Running -> 8 agents up), wall", walls))
    print(f"  REST calls per launch: {statistics.median(calls):.0f}; exec sessions: {statistics.median(execs):.0f}")


async def detection(kube: FakeKube, runs: int) -> None:
    from skyd.clouds.kubernetes.cloud import KubernetesCloud

    lat = []
    for i in range(runs):
        cloud = KubernetesCloud()
        prov = cloud.provisioner()
        r = req(f"never{i}", "4CPU--8GB--MI300X:16", 1, "MI300X", 16)
        try:
            await prov.provision(r, lambda s: None)
        except ResourcesUnavailableError:
            lat.append((time.perf_counter() - kube.created[f"never{i}-b-0"]) * 1000)
        finally:
            await prov.forget(r.partial())
            await cloud.close()
    print(fmt("unschedulable pod created -> context failed (next plan), wall", lat))


async def show_gpus(runs: int) -> None:
    from skyd.clouds.kubernetes.cloud import KubernetesCloud

    cloud = KubernetesCloud()
    xs = []
    for _ in range(runs):
        t0 = time.perf_counter()
        rows = await cloud.gpu_table()
        xs.append((time.perf_counter() - t0) * 1000)
    await cloud.close()
    assert len({r["context"] for r in rows}) == 3, rows
    print(fmt("show-gpus data, 3 contexts x 200 nodes (in process, warm client)", xs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    n = ap.parse_args().n
    tmp = Path(tempfile.mkdtemp(prefix="k8sbench-"))
    os.environ.update(SKYD_HOME=str(tmp / "home"), SKYD_CONFIG_DIR=str(tmp / "config"), SKYD_K8S_POLL_S="0.1")
    kube = FakeKube(tmp / "lab").start()
    kube.add_node(gpu_node("cpu", {}, cpu="64", memory="256Gi"))
    kube.add_node(gpu_node("mi300", {"amd.com/gpu.device-id": "74a1"}, gpus={"amd.com/gpu": 8}))
    os.environ["KUBECONFIG"] = str(kube.kubeconfig(tmp / "kc", {"lab": "default"}))
    big = [FakeKube(tmp / f"c{i}").start() for i in range(3)]
    try:
        anyio.run(launches, kube, n)
        anyio.run(detection, kube, n)
        forms = [({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "nvidia.com/gpu"),
                 ({"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}, "amd.com/gpu"),
                 ({"beta.amd.com/gpu.device-id.74a5": "8"}, "amd.com/gpu"),
                 ({"cloud.google.com/gke-accelerator": "nvidia-l4"}, "nvidia.com/gpu")]
        for k in big:
            for j in range(200):
                labels, key = forms[j % 4]
                k.add_node(gpu_node(f"n{j}", labels, gpus={key: 8}))
                k.pods[("team", f"p{j}")] = {"kind": "Pod", "metadata": {"name": f"p{j}", "namespace": "team",
                                                                         "uid": str(j), "labels": {}},
                                             "spec": {"nodeName": f"n{j}", "containers": [
                                                 {"resources": {"limits": {key: "2"}}}]},
                                             "status": {"phase": "Running"}}
        os.environ["KUBECONFIG"] = str(big[0].kubeconfig(
            tmp / "kc3", {f"c{i}": "default" for i in range(3)}, servers={f"c{i}": k.url for i, k in enumerate(big)}))
        anyio.run(show_gpus, n)
        # The CLI asks the daemon (GET /v1/gpus/k8s): the first call starts it (as any verb
        # does), the others find it warm with its kubernetes client loaded.
        argv = [sys.executable, "-m", "skyd.cli.main", "show-gpus", "--infra", "k8s"]
        os.environ["SKYD_SOCKET"] = str(tmp / "s.sock")
        t0 = time.perf_counter()
        subprocess.run(argv, capture_output=True, text=True, check=True)
        print(f"skyd show-gpus --infra k8s, first call (daemon autostart included): "
              f"{(time.perf_counter() - t0) * 1000:.0f} ms")
        xs = []
        for _ in range(n):
            t0 = time.perf_counter()
            out = subprocess.run(argv, capture_output=True, text=True, check=True)
            xs.append((time.perf_counter() - t0) * 1000)
        print(fmt("skyd show-gpus --infra k8s, CLI wall, daemon up (process start included)", xs))
        print("  " + "\n  ".join(out.stdout.strip().splitlines()[:5]))
        ys = []  # the floor on this machine: CLI start + one daemon round trip
        for _ in range(n):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "skyd.cli.main", "status"], capture_output=True, check=True)
            ys.append((time.perf_counter() - t0) * 1000)
        print(fmt("baseline: skyd status, CLI wall, daemon up", ys))
    finally:
        subprocess.run([sys.executable, "-m", "skyd.cli.main", "daemon", "stop"], capture_output=True)
        for k in big:
            k.stop()
        kube.stop()


if __name__ == "__main__":
    main()
