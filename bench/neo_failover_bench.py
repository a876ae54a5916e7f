"""Failover between the AMD MI300X providers: skyd's added latency per step.

`skyd launch` (accelerators: MI300X:8) through a real daemon and the real CLI, with the fake
DigitalOcean and AMD Developer Cloud APIs both out of capacity (422 on create) and the fake
Crusoe API (HMAC-verified) serving the launch: two failed steps per launch, do/nyc1 ->
amddevcloud/atl1 -> crusoe/us-east1-a. Per failed step: the wall time between consecutive
PROVISION attempts, the fakes' own time answering requests in that step, and the
difference: skyd's own time per step (the provider's calls, forget by tag, re-plan, SQLite).
The network guard refuses anything outside 127.0.0.0/8 (and the bench asserts it recorded
nothing).

    .venv/bin/python bench/neo_failover_bench.py -n 5
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

from tests.fakes.crusoeapi import FakeCrusoe  # noqa: E402
from tests.fakes.doapi import AMD_SIZES, FakeDO  # noqa: E402
from tests.fakes.vmapi import free_port  # noqa: E402
from tests.support.daemon import SKYD_BIN, answers  # noqa: E402
from tests.support.gcp import GUARD_DIR  # noqa: E402
from tests.support.neo import crusoe_environ, do_environ, write_catalog  # noqa: E402

TASK = "resources:\n  accelerators: MI300X:8\nrun: echo FIRST-LINE\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=3)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skyd-neobench-"))
    port = free_port()
    do = FakeDO(tmp / "do", first_ip=150, ssh_port=port, regions=("nyc1",)).start()
    amd = FakeDO(tmp / "amd", first_ip=170, ssh_port=port, token="amd-fake", regions=("atl1",),
                 sizes=AMD_SIZES).start()
    cr = FakeCrusoe(tmp / "crusoe", first_ip=190).start()
    fakes = (do, amd, cr)
    guard = tmp / "guard.log"
    guard.write_text("")
    env = {**os.environ, **do_environ(do, amd, tmp), **crusoe_environ(cr, tmp),
           "SKYD_CATALOG_DIR": str(write_catalog(tmp / "catalog", crusoe=True)),
           "SKYD_HOME": str(tmp / "home"), "SKYD_SOCKET": str(tmp / "s.sock"),
           "SKYD_CONFIG_DIR": str(tmp / "config"), "SKYD_NETGUARD_LOG": str(guard),
           "PYTHONPATH": f"{GUARD_DIR}:{REPO}"}
    daemon = subprocess.Popen([sys.executable, "-m", "skyd.daemon"], env=env, cwd=str(REPO),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SKYD_BIN), *args], env=env, capture_output=True, text=True, timeout=180)

    steps: list[tuple[float, float]] = []
    try:
        while not answers(env["SKYD_SOCKET"]):
            time.sleep(0.02)
        assert run("check").returncode == 0
        os.environ.update({k: env[k] for k in ("SKYD_HOME", "SKYD_SOCKET", "SKYD_CONFIG_DIR")})
        from skyd.sdk.transport import Client

        y = tmp / "fo.yaml"
        y.write_text(TASK)
        for i in range(a.n):
            do.no_capacity()
            amd.no_capacity()
            marks: list[tuple[float, float]] = []
            with Client(autostart=False) as c:
                rid = c.submit("launch", {"yaml": y.read_text(), "yaml_path": str(y),
                                          "base_dir": str(tmp), "cluster_name": f"fo{i}"})
                for e in c.events(rid, True):
                    if e.get("type") == "stage" and e.get("name") == "PROVISION" and e.get("state") == "start":
                        marks.append((time.perf_counter(), sum(f.server_s for f in fakes)))
                    if e.get("type") in ("result", "error"):
                        assert e["type"] == "result", e
                        break
            assert len(marks) == 3, marks
            for (w0, s0), (w1, s1) in zip(marks, marks[1:], strict=False):
                steps.append((w1 - w0, s1 - s0))
            assert run("down", "-y", f"fo{i}").returncode == 0
            assert not (do.live() or amd.live() or cr.live())
        assert guard.read_text() == "", guard.read_text()
    finally:
        run("down", "-a", "-y")
        daemon.terminate()
        daemon.wait(30)
        for f in fakes:
            f.stop()

    def ms(xs: list[float]) -> str:
        return (f"median {statistics.median(xs) * 1000:.0f} ms (min {min(xs) * 1000:.0f}, "
                f"max {max(xs) * 1000:.0f}, n={len(xs)})")

    print(f"failover do -> amddevcloud -> crusoe, MI300X:8: per step wall {ms([w for w, _ in steps])}")
    print(f"  of which the fake APIs' own time: {ms([s for _, s in steps])}")
    print(f"  skyd's own time per step: {ms([w - s for w, s in steps])}")


if __name__ == "__main__":
    main()
