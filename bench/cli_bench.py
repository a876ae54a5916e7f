"""CLI start-up benchmark: wall time (median of N) of one-shot commands.

    .venv/bin/python bench/cli_bench.py [-n 20]

Targets (2-core machine): `skyd --help` <= 80 ms; `skyd status -o json` with the daemon
up and 50 clusters in state <= 120 ms; `skyd status` (table) <= 200 ms.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKYD = str(Path(sys.executable).parent / "skyd")


def start_daemon(env: dict[str, str]) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-m", "skyd.daemon"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(env["SKYD_SOCKET"])
            return p
        except OSError:
            time.sleep(0.05)
        finally:
            s.close()
    p.kill()
    raise SystemExit("daemon did not start")


def insert_clusters(db: Path, n: int) -> None:
    con = sqlite3.connect(db, timeout=10)
    now = time.time()
    con.executemany(
        "INSERT INTO clusters(name, status, cloud, region, zone, instance_type, accelerators, "
        "num_nodes, use_spot, hourly_cost, launched_at, status_updated_at, autostop_minutes, "
        "autostop_down, handle, resources) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [(f"cluster-{i:03d}", ["UP", "STOPPED", "INIT"][i % 3], "aws", "us-east-1",
          "us-east-1a", "p5.48xlarge", '{"H100": 8}', 1 + i % 4, i % 2, 98.32,
          now - 60 * i, now, 30 if i % 2 else None, i % 2, '{"head_ip": "10.0.0.1"}',
          '{"accelerators": {"H100": 8}, "use_spot": false}') for i in range(n)])
    con.commit()
    con.close()


def median_ms(argv: list[str], env: dict[str, str], n: int) -> tuple[float, float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append((time.perf_counter() - t0) * 1000)
        if r.returncode != 0:
            raise SystemExit(f"{argv} failed: {r.stderr.decode()}")
    return statistics.median(times), min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=20)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skyd-bench-"))
    env = {**os.environ, "SKYD_HOME": str(tmp / "home"), "SKYD_SOCKET": str(tmp / "s.sock"),
           "SKYD_CONFIG_DIR": str(tmp / "cfg"), "SKYD_NO_AUTOSTART": "1"}
    base, _ = median_ms([sys.executable, "-c", "pass"], env, args.n)
    print(f"baseline `python -c pass`: {base:.1f} ms")
    d = start_daemon(env)
    try:
        insert_clusters(tmp / "home" / "state.db", 50)
        rows = [
            ("skyd --help", [SKYD, "--help"], 80),
            ("skyd status -o json (50 clusters)", [SKYD, "status", "-o", "json"], 120),
            ("skyd status (table, 50 clusters)", [SKYD, "status"], 200),
        ]
        for name, argv, target in rows:
            med, best = median_ms(argv, env, args.n)
            ok = "OK" if med <= target else "MISS"
            print(f"{name:40s} median {med:6.1f} ms  min {best:6.1f} ms  target <= {target} ms  {ok}")
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(30)


if __name__ == "__main__":
    main()
