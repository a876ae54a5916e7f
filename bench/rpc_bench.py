"""Daemon RPC benchmarks.

    .venv/bin/python bench/rpc_bench.py [--seconds 5] [--clients 50] [--inflight 1000]

1. 50 concurrent keep-alive clients doing GET /v1/status (50 clusters in state) for N s:
   throughput and latency percentiles (targets: >= 2,000 RPC/s, p99 <= 20 ms). The load
   generator is a lean asyncio HTTP/1.1 client in this process (it shares the 2 cores).
2. 1,000 `sleep` requests in flight: daemon RSS growth per request (target <= 50 KB).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_bench import insert_clusters, start_daemon  # noqa: E402

REQ = b"GET /v1/status HTTP/1.1\r\nHost: skyd\r\n\r\n"


async def one_client(path: str, stop_at: float, lat: list[float]) -> int:
    r, w = await asyncio.open_unix_connection(path)
    n = 0
    try:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            w.write(REQ)
            head = await r.readuntil(b"\r\n\r\n")
            cl = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    cl = int(line[15:])
            body = await r.readexactly(cl)
            lat.append(time.perf_counter() - t0)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head + body)
            n += 1
    finally:
        w.close()
    return n


async def throughput(path: str, clients: int, seconds: float) -> None:
    lat: list[float] = []
    # warm-up
    await asyncio.gather(*(one_client(path, time.perf_counter() + 0.5, []) for _ in range(clients)))
    t0 = time.perf_counter()
    counts = await asyncio.gather(*(one_client(path, t0 + seconds, lat) for _ in range(clients)))
    el = time.perf_counter() - t0
    total = sum(counts)
    lat.sort()
    q = statistics.quantiles(lat, n=100)
    print(f"status RPC, {clients} clients, {el:.1f}s: {total / el:,.0f} RPC/s "
          f"(target >= 2,000)  p50 {q[49] * 1000:.2f} ms  p99 {q[98] * 1000:.2f} ms "
          f"(target <= 20)  max {lat[-1] * 1000:.1f} ms")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def post(path: str, url: str, body: dict[str, object] | None, method: str = "POST") -> object:
    r, w = await asyncio.open_unix_connection(path)
    data = json.dumps(body).encode() if body is not None else b""
    w.write(f"{method} {url} HTTP/1.1\r\nHost: s\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
    raw = await r.read()
    w.close()
    return json.loads(raw.split(b"\r\n\r\n", 1)[1] or b"null")


async def inflight(path: str, pid: int, n: int) -> None:
    async def submit(k: int) -> list[str]:
        sem = asyncio.Semaphore(50)

        async def one() -> str:
            async with sem:
                out = await post(path, "/v1/requests/sleep", {"seconds": 120, "log_every": 1.0})
                return str(out["request_id"])  # type: ignore[index]

        return list(await asyncio.gather(*(one() for _ in range(k))))

    warm = await submit(100)  # warm caches/allocator, then measure from a steady state
    await asyncio.sleep(1.5)
    for rid in warm:
        await post(path, f"/v1/requests/{rid}", None, "DELETE")
    await asyncio.sleep(0.5)
    before = rss_kb(pid)
    t0 = time.perf_counter()
    ids = await submit(n)
    took = time.perf_counter() - t0
    await asyncio.sleep(2.5)  # every request has logged at least twice
    after = rss_kb(pid)
    health = await post(path, "/v1/health", None, "GET")
    print(f"{n} requests in flight (submitted in {took:.2f}s, {n / took:,.0f}/s; "
          f"in flight per daemon: {health['requests_in_flight']}): "  # type: ignore[index]
          f"RSS {before / 1024:.1f} -> {after / 1024:.1f} MiB, "
          f"{(after - before) / n:.1f} KB/request (target <= 50)")
    t0 = time.perf_counter()
    sem = asyncio.Semaphore(50)

    async def cancel(rid: str) -> None:
        async with sem:
            await post(path, f"/v1/requests/{rid}", None, "DELETE")

    await asyncio.gather(*(cancel(r) for r in ids))
    print(f"cancelled {n} requests in {time.perf_counter() - t0:.2f}s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--inflight", type=int, default=1000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skyd-bench-"))
    env = {**os.environ, "SKYD_HOME": str(tmp / "home"), "SKYD_SOCKET": str(tmp / "s.sock"),
           "SKYD_CONFIG_DIR": str(tmp / "cfg")}
    d = start_daemon(env)
    try:
        insert_clusters(tmp / "home" / "state.db", 50)
        asyncio.run(throughput(env["SKYD_SOCKET"], args.clients, args.seconds))
        asyncio.run(inflight(env["SKYD_SOCKET"], d.pid, args.inflight))
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(60)


if __name__ == "__main__":
    main()
