"""Neocloud figures (RunPod, Vultr, Hot Aisle fakes: tests/fakes/), through the real daemon
and CLI with the network guard on (nothing outside 127.0.0.0/8).

    .venv/bin/python bench/neocloud_bench.py [-n 5]

- solver, warm: `optimize` of one task `MI300X:8` over every bundled catalog (all
  providers' rows), in this process, median of 50;
- `skyd launch --dryrun` of `accelerators: MI300X:8` (no infra: every provider's catalog),
  whole CLI process wall time against a warm daemon whose checks passed;
- failover: `skyd launch` of MI300X:8 with Hot Aisle (the cheapest) out of capacity, landing
  on Vultr. Per step: wall time between the two PROVISION attempts' starts, the fakes' own
  time answering requests in that step, and the difference: skyd's own added latency
  (refusal classified, forget, SQLite, re-plan).
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fakes.hotaisle import FakeHotAisle  # noqa: E402
from tests.fakes.runpod import FakeRunPod  # noqa: E402
from tests.fakes.vultr import FakeVultr  # noqa: E402
from tests.support.daemon import SKYD_BIN, answers  # noqa: E402
from tests.support.gcp import GUARD_DIR  # noqa: E402
from tests.support.neocloud import hotaisle_env, runpod_env, vultr_env  # noqa: E402

TASK = "resources:\n  accelerators: MI300X:8\nrun: echo FIRST-LINE\n"


def ms(xs: list[float]) -> str:
    return (f"median {statistics.median(xs) * 1000:.1f} ms (min {min(xs) * 1000:.1f}, "
            f"max {max(xs) * 1000:.1f}, n={len(xs)})")


def solver_warm() -> list[float]:
    from skyd.clouds.catalog import load_catalog
    from skyd.solver import DagRequest, ResourceRequest, TaskRequest, optimize

    cat = load_catalog()
    req = DagRequest([TaskRequest("t", [ResourceRequest(accelerator="MI300X", accelerator_count=8)])])
    optimize(req, cat)
    out = []
    for _ in range(50):
        t0 = time.perf_counter()
        optimize(req, cat)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=5)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skyd-neobench-"))
    fakes = {"runpod": FakeRunPod(tmp / "f", first_ip=60).start(),
             "vultr": FakeVultr(tmp / "f", first_ip=90).start(),
             "hotaisle": FakeHotAisle(tmp / "f", first_ip=120).start()}
    guard = tmp / "guard.log"
    guard.write_text("")
    env = {**os.environ, **runpod_env(fakes["runpod"]), **vultr_env(fakes["vultr"]),
           **hotaisle_env(fakes["hotaisle"]),
           "SKYD_HOME": str(tmp / "home"), "SKYD_SOCKET": str(tmp / "s.sock"),
           "SKYD_CONFIG_DIR": str(tmp / "config"), "PYTHONPATH": f"{GUARD_DIR}:{REPO}",
           "SKYD_NETGUARD_LOG": str(guard), "CLOUDSDK_CONFIG": str(tmp / "gcloud"),
           "GOOGLE_APPLICATION_CREDENTIALS": "",
           # Only the fakes: no AWS instance metadata, no developer profile (as the suite sets).
           "SKYD_AWS_LOOPBACK_ONLY": "1", "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_CONFIG_FILE": str(tmp / "aws-config"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "aws-credentials")}
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(k, None)
    env.pop("SKYD_CATALOG_DIR", None)
    solver = solver_warm()
    daemon = subprocess.Popen([sys.executable, "-m", "skyd.daemon"], env=env, cwd=str(REPO),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = lambda *args: subprocess.run([str(SKYD_BIN), *args], env=env, capture_output=True,  # noqa: E731
                                       text=True, timeout=180)
    try:
        while not answers(env["SKYD_SOCKET"]):
            time.sleep(0.02)
        assert run("check").returncode == 0
        y = tmp / "t.yaml"
        y.write_text(TASK)
        dry, base = [], []
        run("launch", "--dryrun", str(y))
        for _ in range(a.n):
            t0 = time.perf_counter()
            run("status")
            base.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            r = run("launch", "--dryrun", str(y))
            dry.append(time.perf_counter() - t0)
            assert r.returncode == 0 and "hotaisle" in r.stdout, r.stdout + r.stderr
        from skyd.sdk.transport import Client

        os.environ.update({k: env[k] for k in ("SKYD_HOME", "SKYD_SOCKET", "SKYD_CONFIG_DIR")})
        steps: list[tuple[float, float]] = []
        for i in range(a.n):
            fakes["hotaisle"].no_capacity.add("*")
            marks: list[tuple[float, float]] = []
            with Client(autostart=False) as c:
                rid = c.submit("launch", {"yaml": TASK, "yaml_path": str(y), "base_dir": str(tmp),
                                          "cluster_name": f"fo{i}"})
                for e in c.events(rid, True):
                    if e.get("type") == "stage" and e.get("name") == "PROVISION" and e.get("state") == "start":
                        marks.append((time.perf_counter(), sum(f.server_s for f in fakes.values())))
                    if e.get("type") in ("result", "error"):
                        assert e["type"] == "result", e
                        break
            assert len(marks) == 2, marks
            (w0, s0), (w1, s1) = marks
            steps.append((w1 - w0, s1 - s0))
            fakes["hotaisle"].clear()
            run("down", "-y", f"fo{i}")
        assert guard.read_text() == "", guard.read_text()
        left = {n: f.live() for n, f in fakes.items() if f.live()}
        assert not left, left
    finally:
        run("down", "-a", "-y")
        daemon.terminate()
        daemon.wait(30)
        for f in fakes.values():
            f.stop()
    print(f"solver, warm, MI300X:8 over every bundled catalog (target <= 20 ms): {ms(solver)}")
    print(f"skyd launch --dryrun MI300X:8, whole process (target <= 150 ms):     {ms(dry)}")
    print(f"  baseline on this machine now, `skyd status` whole process:      {ms(base)}")
    print(f"failover hotaisle (no capacity) -> vultr: step wall {ms([w for w, _ in steps])}")
    print(f"  of which the fakes' own time answering: {ms([s for _, s in steps])}")
    print(f"  skyd's own added latency per step:       {ms([w - s for w, s in steps])}")


if __name__ == "__main__":
    main()
