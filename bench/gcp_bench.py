"""GCP driver figures on the fake Compute API (tests/fakes/gce.py), through the real daemon
and CLI, with the network guard on (nothing outside 127.0.0.0/8).

    .venv/bin/python bench/gcp_bench.py [-n 3]

- failover: `skyd launch` (infra: gcp, cpus: 2) while the first 5 inserts (in the 5 zones
  the planner tries first) fail with ZONE_RESOURCE_POOL_EXHAUSTED; the 6th zone succeeds.
  Per failed step: wall time between consecutive PROVISION attempts, the fake API's own
  time in that step (requests answered, including the 50 ms each operation takes), and
  the difference: skyd's own time per step (re-plan, SQLite, forget by label);
- launch -> first output line: `skyd launch -c NEW` on gcp (fake API + loopback SSH
  host + agent upload) and on `local`, command start -> the job's first line on stdout;
- `skyd check` with gcp configured (token fetch from the fake token endpoint + projects.get),
  CLI wall time.
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

from tests.fakes.gce import FakeGCE  # noqa: E402
from tests.support.daemon import SKYD_BIN, answers  # noqa: E402
from tests.support.gcp import GUARD_DIR, gcp_environ  # noqa: E402

TASK = "resources:\n  infra: {infra}\n  cpus: 2\nrun: echo FIRST-LINE\n"


def first_line(env: dict[str, str], args: list[str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.Popen([str(SKYD_BIN), *args], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    assert p.stdout is not None
    took = float("nan")
    for line in p.stdout:
        if "FIRST-LINE" in line:
            took = time.perf_counter() - t0
            break
    p.wait(120)
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=3)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skyd-gcpbench-"))
    gce = FakeGCE(tmp / "gce", first_ip=200).start()
    creds = gce.service_account_file(tmp / "sa.json")
    guard = tmp / "guard.log"
    guard.write_text("")
    env = {**os.environ, **gcp_environ(gce, creds, guard),
           "SKYD_HOME": str(tmp / "home"), "SKYD_SOCKET": str(tmp / "s.sock"),
           "SKYD_CONFIG_DIR": str(tmp / "config"), "PYTHONPATH": f"{GUARD_DIR}:{REPO}"}
    env.pop("SKYD_CATALOG_DIR", None)
    daemon = subprocess.Popen([sys.executable, "-m", "skyd.daemon"], env=env, cwd=str(REPO),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not answers(env["SKYD_SOCKET"]):
            time.sleep(0.02)
        run = lambda *args: subprocess.run([str(SKYD_BIN), *args], env=env, capture_output=True,  # noqa: E731
                                           text=True, timeout=180)
        # -- skyd check -------------------------------------------------------------------
        checks = []
        for _ in range(a.n):
            t0 = time.perf_counter()
            r = run("check")
            checks.append(time.perf_counter() - t0)
            assert r.returncode == 0, r.stderr
        # -- launch -> first line, gcp vs local -------------------------------------------
        (tmp / "g.yaml").write_text(TASK.format(infra="gcp/us-central1"))
        (tmp / "l.yaml").write_text(TASK.format(infra="local"))
        first: dict[str, list[float]] = {"gcp": [], "local": []}
        for i in range(a.n):
            for infra, y in (("gcp", "g.yaml"), ("local", "l.yaml")):
                first[infra].append(first_line(env, ["launch", "-y", "-c", f"b{infra}{i}", str(tmp / y)]))
                run("down", "-y", f"b{infra}{i}")
        # -- failover: 5 exhausted zones, the 6th works -----------------------------------
        steps: list[tuple[float, float]] = []
        for i in range(a.n):
            gce.fail_next_inserts(5, "ZONE_RESOURCE_POOL_EXHAUSTED", "The zone does not have enough resources")
            from skyd.sdk.transport import Client

            os.environ.update({k: env[k] for k in ("SKYD_HOME", "SKYD_SOCKET", "SKYD_CONFIG_DIR")})
            y = tmp / "fo.yaml"
            y.write_text(TASK.format(infra="gcp"))
            marks: list[tuple[float, float]] = []  # (wall, fake server seconds) at each attempt start
            with Client(autostart=False) as c:
                rid = c.submit("launch", {"yaml": y.read_text(), "yaml_path": str(y),
                                          "base_dir": str(tmp), "cluster_name": f"fo{i}"})
                for e in c.events(rid, True):
                    if e.get("type") == "stage" and e.get("name") == "PROVISION" and e.get("state") == "start":
                        marks.append((time.perf_counter(), gce.server_s))
                    if e.get("type") in ("result", "error"):
                        assert e["type"] == "result", e
                        break
            assert len(marks) == 6, marks
            for (w0, s0), (w1, s1) in zip(marks, marks[1:], strict=False):
                steps.append((w1 - w0, s1 - s0))
            run("down", "-y", f"fo{i}")
        assert guard.read_text() == "", guard.read_text()
    finally:
        run("down", "-a", "-y")
        daemon.terminate()
        daemon.wait(30)
        gce.stop()

    def ms(xs: list[float]) -> str:
        return f"median {statistics.median(xs) * 1000:.0f} ms (min {min(xs) * 1000:.0f}, max {max(xs) * 1000:.0f}, n={len(xs)})"

    print(f"skyd check (gcp configured: token + projects.get), CLI wall: {ms(checks)}")
    print(f"launch -> first output line, gcp (fake API, loopback SSH host): {ms(first['gcp'])}")
    print(f"launch -> first output line, local:                            {ms(first['local'])}")
    wall = [w for w, _ in steps]
    api = [s for _, s in steps]
    own = [w - s for w, s in steps]
    print(f"failover, 5 exhausted zones -> 6th: per step wall {ms(wall)}")
    print(f"  of which the fake API's own time: {ms(api)}")
    print(f"  skyd's own time per step (target <= 50 ms): {ms(own)}")


if __name__ == "__main__":
    main()
