"""Hostile or careless clients against a real daemon on its Unix socket: how long half-open
connections are held, how fast /v1/health answers behind N idle connections, and the daemon's
RSS after a burst of listings over requests that carry the largest accepted payloads.

    .venv/bin/python bench/hostile_clients_bench.py --idle 5000 --half-open 1000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=int, default=5000)
    ap.add_argument("--half-open", type=int, default=1000)
    ap.add_argument("--listings", type=int, default=200)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    base = Path(tempfile.mkdtemp(prefix="skyd-hostile-", dir="/tmp"))
    env = {**os.environ, "SKYD_HOME": str(base / "home"), "SKYD_SOCKET": str(base / "s.sock"),
           "SKYD_CONFIG_DIR": str(base / "cfg"), "PYTHONPATH": str(REPO)}
    os.environ.update({k: env[k] for k in ("SKYD_HOME", "SKYD_SOCKET", "SKYD_CONFIG_DIR")})
    from skyd.sdk.transport import Client, socket_answers

    proc = subprocess.Popen([sys.executable, "-m", "skyd.daemon"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not socket_answers(env["SKYD_SOCKET"], 0.2):
            time.sleep(0.05)
        path = env["SKYD_SOCKET"]
        # 1. half-open connections: when does the daemon close them?
        socks = []
        for _ in range(a.half_open):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        t0 = time.monotonic()
        closed_at = []
        for s in socks:
            s.settimeout(max(0.1, 120 - (time.monotonic() - t0)))
            try:
                if s.recv(1) == b"":
                    closed_at.append(time.monotonic() - t0)
            except OSError:
                pass
            s.close()
        print(f"half-open: {len(closed_at)}/{a.half_open} closed by the daemon, the last after "
              f"{max(closed_at or [0]):.1f}s")
        # 2. health behind N idle connections
        idle = []
        for _ in range(a.idle):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            idle.append(s)
        t1 = time.monotonic()
        with Client(autostart=False, timeout=60) as c:
            c.get("/v1/health")
        print(f"health behind {a.idle} idle connections: {(time.monotonic() - t1) * 1000:.0f} ms")
        for s in idle:
            s.close()
        # 3. listings over large requests
        big = "echo " + "x" * (1000 * 1024)
        with Client(autostart=False, timeout=60) as c:
            for _ in range(5):
                c.submit("sleep", {"seconds": 0, "fail": big[:100]})
            body = json.dumps({"command": big, "cluster_name": "nope", "base_dir": "/"})
            for _ in range(5):
                try:
                    c.post("/v1/requests/exec", json.loads(body))
                except Exception:  # noqa: BLE001 - refused (no such cluster): still stored?
                    pass
        before = rss_mb(proc.pid)

        def burst() -> None:
            with Client(autostart=False, timeout=60) as cc:
                for _ in range(a.listings // 20):
                    cc.get("/v1/requests", {"limit": 5})

        ts = [threading.Thread(target=burst) for _ in range(20)]
        t2 = time.monotonic()
        for t in ts:
            t.start()
        time.sleep(0.2)
        t3 = time.monotonic()
        with Client(autostart=False, timeout=60) as c:
            c.get("/v1/health")
        hl = time.monotonic() - t3
        for t in ts:
            t.join()
        print(f"{a.listings} listings: {time.monotonic() - t2:.2f}s, health during {hl * 1000:.0f} ms,"
              f" RSS {before:.0f} -> {rss_mb(proc.pid):.0f} MB")
    finally:
        proc.terminate()
        proc.wait(30)
        subprocess.run(["rm", "-rf", str(base)])


if __name__ == "__main__":
    main()
