"""The daemon's memory while it serves: N services x M replicas on `local`, traffic through
every load balancer, then the daemon's RSS (VmRSS and VmHWM from /proc).

    .venv/bin/python bench/serve_rss_bench.py [--services 10] [--replicas 4] [--requests 200]

Runs a real daemon in a temporary SKYD_HOME; the replicas are tests/fakes/replica_app.py
(their processes and node agents are not the daemon's and are not counted). Takes every
service down and stops the daemon at the end. Target: <= 150 MB at 10 x 4.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "tests" / "fakes" / "replica_app.py"
SKYD = [sys.executable, "-m", "skyd.cli.main"]


def sh(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SKYD, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def rss_mb(pid: int) -> tuple[float, float]:
    vals = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            vals[k] = int(v.split()[0]) / 1024
    return vals["VmRSS"], vals["VmHWM"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--services", type=int, default=10)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--requests", type=int, default=200, help="per service, after READY")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    home = tempfile.mkdtemp(prefix="skyd-rss-")
    os.environ.update(SKYD_HOME=home, PYTHONPATH=str(ROOT), SKYD_SERVE_PROBE_INTERVAL="1")
    d = Path(home)
    names = [f"rss{i}" for i in range(a.services)]
    try:
        assert sh("daemon", "start").returncode == 0
        pid = int((d / "run" / "skyd.pid").read_text().split()[0])
        base, _ = rss_mb(pid)
        endpoints = {}
        t0 = time.monotonic()
        for n in names:
            f = d / f"{n}.yaml"
            f.write_text(f"name: {n}\nservice:\n  readiness_probe:\n    path: /health\n"
                         f"    initial_delay_seconds: 600\n  replicas: {a.replicas}\n"
                         f"run: exec {sys.executable} {APP}\n")
            r = sh("serve", "up", "-o", "json", str(f))
            assert r.returncode == 0, r.stderr
            endpoints[n] = json.loads(r.stdout)["endpoint"]
        while True:
            r = sh("serve", "status", "-o", "json")
            svcs = json.loads(r.stdout)
            svcs = svcs.get("services", svcs) if isinstance(svcs, dict) else svcs
            ready = sum(1 for s in svcs for x in s["replicas"] if x["status"] == "READY")
            if ready == a.services * a.replicas:
                break
            if time.monotonic() - t0 > a.timeout:
                print(f"only {ready} replicas READY after {a.timeout:.0f}s", file=sys.stderr)
                return 1
            time.sleep(2)
        up_s = time.monotonic() - t0

        def hit(url: str) -> None:
            for _ in range(a.requests):
                with urllib.request.urlopen(url + "/", timeout=10) as resp:
                    resp.read()

        with ThreadPoolExecutor(8) as ex:
            list(ex.map(hit, endpoints.values()))
        time.sleep(3)
        rss, hwm = rss_mb(pid)
        print(f"{a.services} services x {a.replicas} replicas READY in {up_s:.0f}s; "
              f"{a.services * a.requests} requests served")
        print(f"daemon RSS: idle {base:.1f} MB -> serving {rss:.1f} MB (peak {hwm:.1f} MB); "
              f"target <= 150 MB: {'ok' if rss <= 150 else 'OVER'}")
        return 0
    finally:
        sh("serve", "down", "-a", timeout=600)
        sh("daemon", "stop")
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
