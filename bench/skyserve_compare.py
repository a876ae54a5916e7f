"""skyd's load balancer beside SkyServe's own, in one run, on the same two replicas.

    python3 -m venv /tmp/skyvenv && /tmp/skyvenv/bin/pip install skypilot==0.14.1
    SKYPILOT_VENV=/tmp/skyvenv .venv/bin/python bench/skyserve_compare.py [--duration 10]

SkyServe's LB (``sky/serve/load_balancer.py``: FastAPI + httpx under uvicorn) runs
standalone with its own ``__main__``; it learns its ready replicas by POSTing to
``<controller>/controller/load_balancer_sync``, so a 20-line aiohttp stand-in for the
controller answers with the two replica URLs (everything on 127.0.0.1; SkyServe's LB binds
0.0.0.0 itself, and only loopback is connected to). Both LBs use least-load. wrk (Debian
package) drives each target at the same connections; prints req/s, p50/p99 and ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_bench import APP, LB_CHILD, ROOT, free_port, wait_port, wrk  # noqa: E402

GUARD = ROOT / "tests" / "fakes" / "netguard"

CONTROLLER = """
import sys
from aiohttp import web
urls = sys.argv[2:]
async def sync(request):
    await request.read()
    return web.json_response({"replica_info": {u: {"gpu_type": None} for u in urls}})
app = web.Application()
app.router.add_post("/controller/load_balancer_sync", sync)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    venv = os.environ.get("SKYPILOT_VENV")
    if not venv or not Path(venv, "bin", "python").exists():
        sys.exit("set SKYPILOT_VENV to a venv with skypilot installed (see the module doc)")
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    tmp = Path(tempfile.mkdtemp(prefix="skyserve-cmp-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs: list[subprocess.Popen[bytes]] = []
    res: dict[str, dict[str, float]] = {}
    try:
        ports = [free_port(), free_port()]
        for i, p in enumerate(ports, 1):
            procs.append(subprocess.Popen([sys.executable, str(APP), str(p)],
                                          env={**env, "SKYPILOT_SERVE_REPLICA_ID": str(i)}))
        for p in ports:
            wait_port(p)
        a, b = (f"http://127.0.0.1:{p}" for p in ports)
        res["direct (one replica)"] = wrk(a + "/", args)

        lb_port = free_port()
        procs.append(subprocess.Popen([sys.executable, "-c", LB_CHILD, str(lb_port), a, b, "0",
                                       "fast"], env=env))
        wait_port(lb_port)
        res["skyd LB (fastlb, asyncio)"] = wrk(f"http://127.0.0.1:{lb_port}/", args)
        procs[-1].terminate()

        ctl_port, sky_port = free_port(), free_port()
        guard = tmp / "netguard.log"  # the network rule, enforced in SkyServe's process too
        guard.write_text("")
        procs.append(subprocess.Popen([sys.executable, "-c", CONTROLLER, str(ctl_port), a, b],
                                      env=env))
        wait_port(ctl_port)
        log = open(tmp / "skyserve-lb.log", "wb")
        procs.append(subprocess.Popen(
            [f"{venv}/bin/python", "-m", "sky.serve.load_balancer",
             "--controller-addr", f"http://127.0.0.1:{ctl_port}",
             "--load-balancer-port", str(sky_port), "--load-balancing-policy", "least_load"],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "HOME": str(tmp), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
                 "PYTHONPATH": str(GUARD), "SKYD_NETGUARD_LOG": str(guard)}))
        wait_port(sky_port, timeout=60)
        deadline = time.monotonic() + 30  # it syncs with the controller every 20 s
        while time.monotonic() < deadline:
            r = subprocess.run(["curl", "-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}",
                                f"http://127.0.0.1:{sky_port}/"], capture_output=True, text=True)
            if r.stdout == "200":
                break
            time.sleep(0.5)
        else:
            sys.exit(f"SkyServe's LB never served a 200; see {tmp}/skyserve-lb.log")
        res["SkyServe LB (0.14.1)"] = wrk(f"http://127.0.0.1:{sky_port}/", args)
        assert guard.read_text() == "", f"SkyServe's LB connected off loopback: {guard.read_text()}"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    d = res["direct (one replica)"]
    print(f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s, two replicas on loopback")
    print(f"{'target':30} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'of direct':>10}")
    for name, r in res.items():
        print(f"{name:30} {r['rps']:9.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} "
              f"{100 * r['rps'] / d['rps']:9.1f}%")
    sky, ours = res["SkyServe LB (0.14.1)"], res["skyd LB (fastlb, asyncio)"]
    print(f"skyd LB / SkyServe LB throughput: {ours['rps'] / sky['rps']:.1f}x; "
          f"p50 {sky['p50_ms']:.1f} ms -> {ours['p50_ms']:.2f} ms")


if __name__ == "__main__":
    main()
