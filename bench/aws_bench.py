"""The aws provider on moto's server (through tests/fakes/awsproxy.py), loopback only.

    .venv/bin/python bench/aws_bench.py [--only parallel|failover|launch] [-n 3] [--instances 64]

- parallel: 64 instances provisioned at once -- 64 one-node clusters concurrently (each:
  zone lookup, type checks, image, key pair, security group, RunInstances, rank tags, wait
  until running), then all terminated; wall time and EC2 API calls/s. The node agent is not
  deployed here (agent deployment over SSH is measured by bench/ssh_bench.py);
- failover: a real daemon launches m6i.large on a catalog with six zones of us-east-1 whose
  first five answer RunInstances with InsufficientInstanceCapacity; per failed step, skyd's
  own time = the time between two attempts' PROVISION starts minus the time an API request
  was in flight in that interval (target <= 50 ms);
- launch: `skyd launch -c NEW task.yaml` start -> the job's first output line, on aws (moto +
  a loopback fake SSH host) and on `local`, median of n.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("SKYD_AWS_LOOPBACK_ONLY", "1")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

from bench.launch_bench import _answers, skyd, time_to_line  # noqa: E402
from tests.support.aws import REGION, fake_aws  # noqa: E402


@contextmanager
def daemon(**extra: str) -> Iterator[dict[str, str]]:
    """A daemon in a throwaway SKYD_HOME with ``extra`` in its environment (the fake AWS);
    yields the env for CLI calls (also put in os.environ for the SDK client)."""
    import shutil
    import signal
    import subprocess

    home = Path(tempfile.mkdtemp(prefix="skyd-awsbd-"))
    env = {**os.environ, "SKYD_HOME": str(home / "home"), "SKYD_SOCKET": str(home / "s.sock"),
           "SKYD_CONFIG_DIR": str(home / "config"), "PYTHONPATH": str(REPO), **extra}
    saved = dict(os.environ)
    os.environ.update(env)
    proc = subprocess.Popen([sys.executable, "-m", "skyd.daemon"], env=env, cwd=str(REPO),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not _answers(env["SKYD_SOCKET"]):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("daemon did not start")
            time.sleep(0.02)
        yield env
    finally:
        subprocess.run([str(Path(sys.executable).parent / "skyd"), "down", "-a", "-y"], env=env,
                       capture_output=True, timeout=300)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(home, ignore_errors=True)


def bench_parallel(root: Path, n: int = 64) -> None:
    import anyio

    from skyd.clouds.aws import session
    from skyd.clouds.aws.cloud import AWSCloud
    from skyd.clouds.base import ProvisionRequest
    from skyd.clouds.offering import Offering

    with fake_aws(root) as c:
        os.environ.update(c.env, SKYD_HOME=str(root / "home"))
        off = Offering("aws", "m6i.large", None, 0, 2, 8, REGION, "use1-az1", 0.096, 0.03)

        async def main() -> tuple[float, float, int, int]:
            cloud = AWSCloud()
            prov = cloud.provisioner()
            prov.deploy_agents = False
            await cloud.check()  # moto's warm-up is not ours
            fresh = AWSCloud()  # a new session: credential chain + sts get_caller_identity
            t = time.perf_counter()
            ok, _ = await fresh.check()
            check_s = time.perf_counter() - t
            await fresh.close()
            assert ok
            reqs = [ProvisionRequest(f"par-{i}", 1, off, False, token="t", tag=f"par-{i}-b")
                    for i in range(n)]
            handles: list[Any] = [None] * n
            session.CALLS.clear()

            async def one(i: int) -> None:
                handles[i] = await prov.provision(reqs[i], lambda _m: None)

            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(one, i)
            up = time.perf_counter() - t0
            calls = sum(session.CALLS.values())
            session.CALLS.clear()
            t1 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for h in handles:
                    tg.start_soon(prov.terminate, h, lambda _m: None)
            down = time.perf_counter() - t1
            dcalls = sum(session.CALLS.values())
            await cloud.close()
            return up, down, calls, dcalls, check_s

        up, down, calls, dcalls, check_s = anyio.run(main)
        assert c.leftovers() == {}, c.leftovers()
    print(f"check: `aws` credential check (fresh session, sts get_caller_identity): {check_s * 1000:.0f} ms")
    print(f"parallel: {n} instances up (running, addresses known) in {up:.2f} s, "
          f"{calls} API calls ({calls / up:.0f}/s); terminated + cleaned in {down:.2f} s, "
          f"{dcalls} calls ({dcalls / down:.0f}/s)")


CATALOG_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n"
SIX = ["use1-az1", "use1-az2", "use1-az3", "use1-az4", "use1-az5", "use1-az6"]
NAMES = {"use1-az6": "us-east-1a", "use1-az1": "us-east-1b", "use1-az2": "us-east-1c",
         "use1-az4": "us-east-1d", "use1-az3": "us-east-1e", "use1-az5": "us-east-1f"}


def _busy(intervals: list[tuple[float, float]], a: float, b: float) -> float:
    """Wall time within [a, b] during which at least one API request was in flight."""
    spans = sorted((max(s, a), min(e, b)) for s, e in intervals if e > a and s < b)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None and cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None and cur_s is not None:
        total += cur_e - cur_s
    return total


def bench_failover(root: Path, runs: int) -> None:
    from skyd.sdk.transport import Client

    cat = root / "catalog"
    cat.mkdir()
    (cat / "aws.csv").write_text(CATALOG_HEADER + "".join(
        f"m6i.large,,,2.0,8.0,,us-east-1,{z},{0.096 + i * 0.001:.3f},\n" for i, z in enumerate(SIX)))
    with fake_aws(root / "f", hosts=1) as c:
        for z in SIX[:5]:
            c.proxy.fail(NAMES[z], "InsufficientInstanceCapacity")
        with daemon(**c.env, SKYD_CATALOG_DIR=str(cat)) as env:
            task = root / "t.yaml"
            task.write_text("resources:\n  infra: aws/us-east-1\n  instance_type: m6i.large\nrun: echo fo\n")
            skyd(env, "launch", "-c", "fo-warm", "-y", str(task), timeout=300)
            skyd(env, "down", "fo-warm", "-y", timeout=120)
            own: list[float] = []
            api: list[float] = []
            for r in range(runs):
                with Client(autostart=False) as cl:
                    rid = cl.submit("launch", {"yaml": task.read_text(), "yaml_path": str(task),
                                               "base_dir": str(root), "cluster_name": f"fo-{r}"})
                    evs = list(cl.events(rid, True))
                starts = [e["ts"] for e in evs if e.get("type") == "stage" and e.get("name") == "PROVISION"
                          and e.get("state") == "start"]
                assert len(starts) == 6, f"expected 6 attempts, saw {len(starts)}"
                for a, b in zip(starts, starts[1:], strict=False):
                    busy = _busy(c.proxy.intervals, a, b)
                    own.append(b - a - busy)
                    api.append(busy)
                skyd(env, "down", f"fo-{r}", "-y", timeout=120)
        assert c.leftovers() == {}, c.leftovers()
    print(f"failover: 5 exhausted zones -> 6th, {runs} run(s): per step own time median "
          f"{statistics.median(own) * 1000:.0f} ms (max {max(own) * 1000:.0f} ms; target <= 50 ms), "
          f"API time per step median {statistics.median(api) * 1000:.0f} ms")


def bench_launch(root: Path, n: int) -> None:
    with fake_aws(root / "l", hosts=1) as c, daemon(**c.env) as env:
        aws_t = root / "aws.yaml"
        aws_t.write_text("resources:\n  infra: aws/us-east-1\n  instance_type: m6i.large\nrun: echo FIRST\n")
        loc_t = root / "local.yaml"
        loc_t.write_text("resources:\n  infra: local\nrun: echo FIRST\n")
        for name, t in (("warm-a", aws_t), ("warm-l", loc_t)):
            skyd(env, "launch", "-c", name, "-y", str(t), timeout=300)
            skyd(env, "down", name, "-y", timeout=120)
        res: dict[str, list[float]] = {"aws": [], "local": []}
        for i in range(n):
            for kind, t in (("aws", aws_t), ("local", loc_t)):
                res[kind].append(time_to_line(env, ["launch", "-c", f"lt-{kind}-{i}", "-y", str(t)], "FIRST"))
                skyd(env, "down", f"lt-{kind}-{i}", "-y", timeout=120)
        assert c.leftovers() == {}, c.leftovers()
    for kind, xs in res.items():
        print(f"launch -> first output line on {kind:5s}: median {statistics.median(xs) * 1000:.0f} ms "
              f"(min {min(xs) * 1000:.0f}, max {max(xs) * 1000:.0f}, n={len(xs)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=["parallel", "failover", "launch"])
    ap.add_argument("-n", type=int, default=3)
    ap.add_argument("--instances", type=int, default=64)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="skyd-awsb-"))
    if args.only in (None, "parallel"):
        bench_parallel(root / "p", args.instances)
    if args.only in (None, "failover"):
        bench_failover(root, args.n)
    if args.only in (None, "launch"):
        bench_launch(root, args.n)


if __name__ == "__main__":
    main()
