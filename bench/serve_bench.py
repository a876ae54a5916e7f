"""The serving load balancer against direct replicas and nginx, on loopback, in one run.

    .venv/bin/python bench/serve_bench.py [--duration 10] [--connections 64] [--threads 2]

Starts two replicas (tests/fakes/replica_app.py, a stdlib asyncio HTTP/1.1 server;
figures before 2026-12-03 were taken with an aiohttp one, about half as fast direct) on 127.0.0.1, then runs wrk
(Debian package `wrk`) at N keep-alive connections against: one replica directly; skyd's
load balancer (skyd.serve.lb.LoadBalancer, least_load, in its own process as in the
daemon: one asyncio loop); the same with uvloop when it is installed; nginx (Debian package,
a plain reverse proxy with an upstream keep-alive pool) when it is installed. Prints
req/s and p50/p99 per target and the latency each proxy adds over direct.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "tests" / "fakes" / "replica_app.py"

LB_CHILD = """
import sys, anyio
from skyd.serve.lb import LoadBalancer
from skyd.serve.fastlb import FastLoadBalancer
port, a, b, use_uvloop = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
cls = FastLoadBalancer if sys.argv[5] == "fast" else LoadBalancer
async def main():
    lb = cls("bench", host="127.0.0.1", port=port, policy="least_load")
    lb.set_replicas([(1, a, 1.0), (2, b, 1.0)])
    await lb.serve()
anyio.run(main, backend_options={"use_uvloop": use_uvloop})
"""

NGINX_CONF = """
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  upstream replicas {{ least_conn; server {a}; server {b}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://replicas; proxy_http_version 1.1;
      proxy_set_header Connection ""; proxy_buffering off;
    }}
  }}
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def ms(v: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", v)
    assert m, v
    x = float(m.group(1))
    return x / 1000 if m.group(2) == "us" else x * 1000 if m.group(2) == "s" else x


def wrk(url: str, args: argparse.Namespace) -> dict[str, float]:
    out = subprocess.run(["wrk", f"-t{args.threads}", f"-c{args.connections}",
                          f"-d{args.duration}s", "--latency", url],
                         capture_output=True, text=True, check=True).stdout
    return parse(out)


def parse(out: str) -> dict[str, float]:
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    errs = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50_ms": p50, "p99_ms": p99, "non2xx": float(errs.group(1)) if errs else 0}


def chunk_delays(url: str, n: int = 100, delay: float = 0.01) -> dict[str, float]:
    """A token stream: per chunk, arrival time minus the replica's stamp (ms); p50/p99."""
    host, port = url.removeprefix("http://").split(":")
    lat: list[float] = []
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"GET /stream?n={n}&delay={delay} HTTP/1.1\r\nHost: x\r\n"
                  "Connection: close\r\n\r\n".encode())
        buf = b""
        while True:
            data = s.recv(65536)
            now = time.time()
            if not data:
                break
            buf += data
            for m in re.finditer(rb"token \d+ ([\d.]+)\n", buf):
                lat.append((now - float(m.group(1))) * 1000)
            buf = buf[buf.rfind(b"\n") + 1:]
    lat.sort()
    return {"p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99) - 1], "n": len(lat)}


def direct_two(a: str, b: str, args: argparse.Namespace) -> dict[str, float]:
    """Half the connections straight at each replica, at once: req/s summed, latency of the
    first."""
    half = max(1, args.connections // 2)
    threads = max(1, args.threads // 2)
    ps = [subprocess.Popen(["wrk", f"-t{threads}", f"-c{half}", f"-d{args.duration}s",
                            "--latency", u + "/"], stdout=subprocess.PIPE, text=True)
          for u in (a, b)]
    outs = [p.communicate()[0] for p in ps]
    rs = [parse(o) for o in outs]
    return {"rps": rs[0]["rps"] + rs[1]["rps"], "p50_ms": rs[0]["p50_ms"],
            "p99_ms": rs[0]["p99_ms"], "non2xx": rs[0]["non2xx"] + rs[1]["non2xx"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed (apt-get install wrk)")
    procs: list[subprocess.Popen[bytes]] = []
    tmp = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    results: dict[str, dict[str, float]] = {}
    try:
        ports = [free_port(), free_port()]
        for i, p in enumerate(ports, 1):
            procs.append(subprocess.Popen([sys.executable, str(APP), str(p)],
                                          env={**env, "SKYPILOT_SERVE_REPLICA_ID": str(i)}))
        for p in ports:
            wait_port(p)
        a, b = (f"http://127.0.0.1:{p}" for p in ports)
        streams: dict[str, dict[str, float]] = {"direct": chunk_delays(a)}
        results["direct (one replica)"] = wrk(a + "/", args)
        results["direct (two replicas)"] = direct_two(a, b, args)
        try:
            import uvloop  # noqa: F401
            loops = ["0", "1"]
        except ImportError:
            loops = ["0"]
        for impl, use in [("aiohttp", "0"), *(("fast", u) for u in loops)]:
            port = free_port()
            lb = subprocess.Popen([sys.executable, "-c", LB_CHILD, str(port), a, b, use, impl],
                                  env=env)
            procs.append(lb)
            wait_port(port)
            wrk(f"http://127.0.0.1:{port}/", argparse.Namespace(**{**vars(args), "duration": 2}))
            streams[f"skyd lb {impl}" + (" +uvloop" if use == "1" else "")] = chunk_delays(
                f"http://127.0.0.1:{port}")
            label = "skyd lb, aiohttp" if impl == "aiohttp" else "skyd lb, httptools"
            results[label + (" +uvloop" if use == "1" else "")] = wrk(
                f"http://127.0.0.1:{port}/", args)
            lb.send_signal(signal.SIGTERM)
            lb.wait(10)
        if shutil.which("nginx") or Path("/usr/sbin/nginx").exists():
            port = free_port()
            conf = tmp / "nginx.conf"
            conf.write_text(NGINX_CONF.format(d=tmp, port=port, a=a[7:], b=b[7:]))
            ng = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(conf),
                                   "-g", "daemon off;"])
            procs.append(ng)
            wait_port(port)
            streams["nginx"] = chunk_delays(f"http://127.0.0.1:{port}")
            results["nginx"] = wrk(f"http://127.0.0.1:{port}/", args)
            ng.send_signal(signal.SIGQUIT)
            ng.wait(10)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    base = results["direct (one replica)"]
    print(f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s, loopback, 2 replicas")
    print(f"{'target':24} {'req/s':>10} {'% direct':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'+p50 ms':>8} {'+p99 ms':>8}")
    for k, r in results.items():
        print(f"{k:24} {r['rps']:10.0f} {100 * r['rps'] / base['rps']:8.0f}% {r['p50_ms']:8.2f} "
              f"{r['p99_ms']:8.2f} {r['p50_ms'] - base['p50_ms']:8.2f} "
              f"{r['p99_ms'] - base['p99_ms']:8.2f}" + (f"  non-2xx {r['non2xx']:.0f}" if r["non2xx"] else ""))
    print("token stream (100 chunks, 10 ms apart), chunk arrival - replica stamp:")
    for k, v in streams.items():
        print(f"  {k:28} p50 {v['p50']:.2f} ms  p99 {v['p99']:.2f} ms  ({v['n']:.0f} chunks)")
    print(json.dumps({"wrk": results, "stream": streams}))


if __name__ == "__main__":
    main()
