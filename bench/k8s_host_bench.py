"""A daemon in Kubernetes (SKYD_HOST=k8s://…) against the same daemon used locally.

    .venv/bin/python bench/k8s_host_bench.py [-n 10]

The "cluster" is the fake API server of the tests (tests/fakes/kubeapi.py, on 127.0.0.1):
`skyd daemon deploy k8s://lab/skyd-ns` runs the daemon as its StatefulSet's pod (a local
process whose SKYD_HOME is the claim's directory). Then `skyd status` is timed both ways, in
turn (pairs):
- local: SKYD_HOME/SKYD_SOCKET of the pod's daemon (its Unix socket, as inside the pod);
- k8s:   SKYD_HOST=k8s://lab/skyd-ns (kubeconfig, API server, pod exec, the byte relay).
Also timed: one bare exec round trip (`true` in the pod, through the same client code).
Figures: medians (ms).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120,
                       stdin=subprocess.DEVNULL)
    dt = (time.perf_counter() - t0) * 1000
    if r.returncode != 0:
        raise SystemExit(f"{argv}: {r.returncode}\n{r.stdout}\n{r.stderr}")
    return dt


async def exec_rtt(n: int) -> float:
    from skyd.clouds.kubernetes.api import ContextAPI
    from skyd.transports.kube import KubeTransport

    api = ContextAPI("lab", "skyd-ns")
    tr = KubeTransport(await api.exec_conn(), "skyd-ns", "skyd-0", "skyd")
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await tr.run("true", check=True)
        out.append((time.perf_counter() - t0) * 1000)
    await api.close()
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=10)
    a = ap.parse_args()
    from tests.fakes.kubeapi import FakeKube, gpu_node

    skyd = str(Path(sys.executable).parent / "skyd")
    with tempfile.TemporaryDirectory(prefix="k8shb-") as d:
        base = Path(d)
        fake = FakeKube(base / "kube").start()
        try:
            fake.add_node(gpu_node("node-a", {}, cpu="16", memory="64Gi"))
            # As in the default image, python3 is a plain executable (not a version-manager
            # shim, which costs ~0.5 s per start on this machine).
            if os.path.exists("/usr/bin/python3"):
                fake.image_env = {"PATH": "/usr/bin:" + os.environ.get("PATH", "/bin")}
            cfg = fake.kubeconfig(base / "kubeconfig", {"lab": "skyd-ns"})
            wrapper = base / "skyd-bin"
            wrapper.write_text(f"#!/bin/sh\nexport PYTHONPATH={ROOT}\n"
                               f"exec {sys.executable} -m skyd.cli.main \"$@\"\n")
            wrapper.chmod(0o755)
            env = {**os.environ, "SKYD_HOME": str(base / "client"), "KUBECONFIG": str(cfg),
                   "SKYD_CONFIG_DIR": str(base / "cfg")}
            for k in ("SKYD_SOCKET", "SKYD_HOST"):
                env.pop(k, None)
            os.environ["KUBECONFIG"] = str(cfg)
            timed([skyd, "daemon", "deploy", "k8s://lab/skyd-ns", "--binary", str(wrapper)], env)
            pod = fake.pods[("skyd-ns", "skyd-0")]
            penv = fake._container_env(pod)
            local = {**env, "SKYD_HOME": penv["SKYD_HOME"], "SKYD_SOCKET": penv["SKYD_SOCKET"],
                     "SKYD_NO_AUTOSTART": "1"}
            remote = {**env, "SKYD_HOST": "k8s://lab/skyd-ns"}
            timed([skyd, "status"], remote)  # warm
            loc, k8s = [], []
            for _ in range(a.n):
                loc.append(timed([skyd, "status"], local))
                k8s.append(timed([skyd, "status"], remote))
            rtt = asyncio.run(exec_rtt(a.n))
            execs = fake.exec_calls
            timed([skyd, "status"], remote)
            per_status = fake.exec_calls - execs
        finally:
            fake.stop()
    load = Path("/proc/loadavg").read_text().split()[0]
    ml, mk = statistics.median(loc), statistics.median(k8s)
    print(f"load average {load}; medians of {a.n}")
    print(f"skyd status  local {ml:.1f} ms  k8s:// {mk:.1f} ms  (+{mk - ml:.1f} ms; "
          f"local {min(loc):.0f}-{max(loc):.0f}, k8s {min(k8s):.0f}-{max(k8s):.0f})")
    print(f"one exec round trip (`true` in the pod): {rtt:.1f} ms; exec sessions per status: "
          f"{per_status}")


if __name__ == "__main__":
    main()
