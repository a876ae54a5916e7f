"""Per-call cost of the node agent's mutual TLS, against the plaintext + bearer-token channel
it replaced, side by side in one run.

    .venv/bin/python bench/agent_tls_bench.py [--fresh 300] [--kept 3000]

A child process serves the real NodeAgentService twice: on a plaintext port that checks an
``authorization: Bearer`` header (the old channel) and on a mutual-TLS port (today's).
The parent measures Health calls:
1. a fresh channel per call (what the daemon does: one AgentClient per request): connect,
   TLS handshake, call, close;
2. calls on one kept channel (the handshake paid once).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECRET = "bench-cluster-secret"


async def serve(home: Path) -> None:
    from grpclib.const import Status
    from grpclib.events import RecvRequest, listen
    from grpclib.exceptions import GRPCError
    from grpclib.server import Server

    from skyd.nodeagent import auth
    from skyd.nodeagent.core import Agent
    from skyd.nodeagent.credentials import write_agent_credentials
    from skyd.nodeagent.service import NodeAgentService

    write_agent_credentials(home, SECRET)
    agent = Agent(home, rank=0, cluster="bench", peer_ssl=None, gpus=[], cpus=1.0,
                  memory_gb=1.0, autostop_action="local-stop")  # fmt: skip
    expected = f"Bearer {SECRET}".encode()

    async def bearer(event: RecvRequest) -> None:  # the old check
        got = str(event.metadata.get("authorization", "")).encode()
        if not hmac.compare_digest(got, expected):
            raise GRPCError(Status.UNAUTHENTICATED, "wrong token")

    plain = Server([NodeAgentService(agent)])
    listen(plain, RecvRequest, bearer)
    await plain.start("127.0.0.1", 0)
    tls = Server([NodeAgentService(agent)])
    await tls.start("127.0.0.1", 0, ssl=auth.server_context(home))
    ports = [s._server.sockets[0].getsockname()[1] for s in (plain, tls)]  # type: ignore[union-attr]
    print(*ports, flush=True)
    await asyncio.Event().wait()


CPU: dict[str, float] = {}  # name -> CPU seconds (client + server) spent in its calls
CHILD = 0


def cpu_now() -> float:
    """CPU seconds of this process plus the serving child (load-independent cost)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{CHILD}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return time.process_time() + (int(fields[11]) + int(fields[12])) / ticks


def stats(name: str, lat: list[float]) -> tuple[float, float]:
    lat.sort()
    q = statistics.quantiles(lat, n=100)
    cpu = CPU.get(name, 0.0) / len(lat)
    print(f"  {name:<28} p50 {q[49] * 1000:7.3f} ms  p99 {q[98] * 1000:7.3f} ms  "
          f"mean {statistics.fmean(lat) * 1000:7.3f} ms  CPU {cpu * 1000:6.3f} ms/call")  # fmt: skip
    return q[49], statistics.fmean(lat)


async def measure(ports: list[int], fresh: int, kept: int) -> None:
    from grpclib.client import Channel

    from skyd.nodeagent.client import AgentClient
    from skyd.proto import skyd_agent as pb

    def plain_client() -> tuple[Channel, pb.NodeAgentStub]:
        ch = Channel("127.0.0.1", ports[0])
        return ch, pb.NodeAgentStub(ch, metadata={"authorization": f"Bearer {SECRET}"}, timeout=30)

    async def plain_fresh() -> None:
        ch, stub = plain_client()
        try:
            await stub.health(pb.HealthRequest())
        finally:
            ch.close()

    async def tls_fresh() -> None:
        async with AgentClient("127.0.0.1", ports[1], SECRET) as c:
            assert await c.health()

    async def timed(fn: object, n: int, name: str = "") -> list[float]:
        out = []
        c0 = cpu_now()
        for _ in range(n):
            t0 = time.perf_counter()
            await fn()  # type: ignore[operator]
            out.append(time.perf_counter() - t0)
        CPU[name] = CPU.get(name, 0.0) + cpu_now() - c0
        return out

    for fn in (plain_fresh, tls_fresh):  # warm-up (the daemon's client context is built once)
        await timed(fn, 20)
    print(f"fresh channel per call ({fresh} sequential Health calls each, interleaved):")
    a: list[float] = []
    b: list[float] = []
    for _ in range(fresh // 50):
        a += await timed(plain_fresh, 50, "plaintext + bearer (old)")
        b += await timed(tls_fresh, 50, "mutual TLS (new)")
    pa = stats("plaintext + bearer (old)", a)
    pb_ = stats("mutual TLS (new)", b)
    CPU.clear()
    print(f"  TLS overhead: +{(pb_[0] - pa[0]) * 1000:.3f} ms p50, "
          f"x{pb_[1] / pa[1]:.2f} mean")  # fmt: skip

    ch, stub = plain_client()
    tc = AgentClient("127.0.0.1", ports[1], SECRET)
    try:
        print(f"kept channel ({kept} sequential Health calls each, interleaved):")
        a, b = [], []
        for _ in range(kept // 500):
            a += await timed(lambda: stub.health(pb.HealthRequest()), 500,
                             "plaintext + bearer (old)")
            b += await timed(tc.health, 500, "mutual TLS (new)")
        pa = stats("plaintext + bearer (old)", a)
        pb_ = stats("mutual TLS (new)", b)
        print(f"  TLS overhead: +{(pb_[0] - pa[0]) * 1000:.3f} ms p50, "
              f"x{pb_[1] / pa[1]:.2f} mean")  # fmt: skip
    finally:
        ch.close()
        tc.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--fresh", type=int, default=300)
    ap.add_argument("--kept", type=int, default=3000)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(serve(Path(args.serve)))
        return
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, MULTIDICT_NO_EXTENSIONS="1")
        child = subprocess.Popen([sys.executable, __file__, "--serve", d], stdout=subprocess.PIPE,
                                 text=True, env=env)  # fmt: skip
        global CHILD
        CHILD = child.pid
        try:
            assert child.stdout is not None
            ports = [int(p) for p in child.stdout.readline().split()]
            print(f"loadavg {open('/proc/loadavg').read().split()[:3]}")
            asyncio.run(measure(ports, args.fresh, args.kept))
        finally:
            child.kill()
            child.wait()


if __name__ == "__main__":
    main()
