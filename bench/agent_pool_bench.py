"""CPU per call of skyd.pipeline.agents.agent() (the daemon's kept channel) against the
pattern it replaced (a fresh AgentClient, so a TCP connection and a TLS handshake, per call),
in alternating batches of 50 against one real node agent process, after a warm-up.

    .venv/bin/python bench/agent_pool_bench.py [calls per variant, default 400]

CPU = this process + the agent process, per call.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import anyio  # noqa: E402

from skyd.clouds.base import ClusterHandle, NodeHandle  # noqa: E402
from skyd.clouds.local import LocalProvisioner  # noqa: E402
from skyd.nodeagent.client import AgentClient, start_agent_detached_blocking  # noqa: E402
from skyd.pipeline.agents import agent  # noqa: E402
from skyd.transports.agent_deploy import client_ssl  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 400
TOKEN = "bench-secret"


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        home = Path(d) / "node0"
        info = start_agent_detached_blocking(home, cluster_secret=TOKEN, cluster="b")
        pid = int(info["pid"])
        try:
            run(pid, Path(d), home, int(info["port"]))
        finally:
            os.kill(pid, 9)


def cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fl = f.read().rsplit(")", 1)[1].split()
    return time.process_time() + (int(fl[11]) + int(fl[12])) / os.sysconf("SC_CLK_TCK")


def run(pid: int, root: Path, home: Path, port: int) -> None:
    prov = LocalProvisioner(root)
    h = ClusterHandle(cluster_name="b", cloud="local", region=None, zone=None,
                      instance_type=None, use_spot=False, accelerators={}, num_nodes=1,
                      hourly_cost=0.0, token=TOKEN,
                      nodes=[NodeHandle(0, "n0", "127.0.0.1", port, str(home))])

    async def pooled() -> None:
        async with agent(prov, h) as c:
            assert await c.health()

    async def fresh() -> None:  # the code agent() replaced
        host, p = await prov.agent_endpoint(h, 0)
        async with AgentClient(host, p, ssl=await client_ssl(TOKEN)) as c:
            assert await c.health()

    res: dict[str, list[float]] = {"fresh": [], "pooled": []}
    cpus = {"fresh": 0.0, "pooled": 0.0}

    async def go() -> None:
        for fn in (fresh, pooled):
            for _ in range(20):
                await fn()
        for _ in range(N // 50):
            for name, fn in (("fresh", fresh), ("pooled", pooled)):
                c0 = cpu(pid)
                for _ in range(50):
                    t0 = time.perf_counter()
                    await fn()
                    res[name].append(time.perf_counter() - t0)
                cpus[name] += cpu(pid) - c0

    print("loadavg", open("/proc/loadavg").read().split()[:3])
    anyio.run(go)
    for name, lat in res.items():
        q = statistics.quantiles(sorted(lat), n=100)
        print(f"  agent() {name:<7} n={len(lat)} p50 {q[49]*1e3:7.3f} ms  p99 {q[98]*1e3:7.3f} ms"
              f"  mean {statistics.fmean(lat)*1e3:7.3f} ms  CPU {cpus[name]/len(lat)*1e3:6.3f} ms/call")
    print("loadavg", open("/proc/loadavg").read().split()[:3])


if __name__ == "__main__":
    main()
