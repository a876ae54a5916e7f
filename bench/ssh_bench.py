"""SSH infra benchmarks over loopback SSH (fake asyncssh hosts; --sshd adds real OpenSSH sync).

    .venv/bin/python bench/ssh_bench.py [--files 10000] [--size 10240] [--deploys 5] [--sshd]

1. First agent deployment to a fresh host: provision() of a 1-node cluster (probe, upload the
   zipapp, write the token, start the agent, read agent.json) + one health call through the
   SSH forward. Zipapp build time reported separately (once per daemon).
2. Workdir sync of N small files: rsync vs SFTP, first sync and no-change re-sync.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


async def bench_deploy(tmp: Path, n: int) -> None:
    from skyd.clouds.base import ProvisionRequest
    from skyd.clouds.offering import Offering
    from skyd.clouds.ssh.provisioner import SSHProvisioner
    from skyd.nodeagent.client import AgentClient
    from skyd.transports.agent_deploy import agent_zipapp
    from tests.fakes.sshhost import FakeSSHHost, make_keypair, write_pools

    t0 = time.perf_counter()
    path, sha = await agent_zipapp()
    print(f"agent zipapp build: {time.perf_counter() - t0:.2f} s ({path.stat().st_size / 1e6:.2f} MB)")
    priv, pub = make_keypair(tmp / "keys")
    times, health = [], []
    for i in range(n):
        async with FakeSSHHost(tmp / f"deploy{i}", "127.0.0.2", pub) as h:
            write_pools(Path(os.environ["SKYD_CONFIG_DIR"]), {"b": [h]}, priv)
            p = SSHProvisioner(zipapp=(path, sha))
            off = Offering("ssh", "", None, 0, 0, 0, "b", None, 0.0, None)
            t0 = time.perf_counter()
            handle = await p.provision(ProvisionRequest(f"b{i}", 1, off, False), lambda m: None)
            t1 = time.perf_counter()
            host, port = await p.agent_endpoint(handle, 0)
            async with AgentClient(host, port, handle.token) as c:
                assert await c.health()
            t2 = time.perf_counter()
            times.append(t1 - t0)
            health.append(t2 - t0)
            await p.terminate(handle, lambda m: None)
            await p.close()
    print(f"first agent deployment to a fresh host (provision): median {statistics.median(times):.2f} s "
          f"(min {min(times):.2f}, max {max(times):.2f}, n={n}); "
          f"+ first health via forward: median {statistics.median(health):.2f} s  [target <= 2 s]")


def make_files(src: Path, n: int, size: int) -> None:
    block = os.urandom(size)
    for i in range(n):
        d = src / f"d{i % 100:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.bin").write_bytes(block[: size - 8] + i.to_bytes(8, "little"))


async def bench_sync(tmp: Path, n: int, size: int, use_sshd: bool) -> None:
    from skyd.transports.ssh import SSHTarget, SSHTransport
    from skyd.transports.sync import sync_to_remote
    from tests.fakes.sshhost import FakeSSHHost, make_keypair

    src = tmp / "src"
    t0 = time.perf_counter()
    await anyio.to_thread.run_sync(make_files, src, n, size)
    print(f"workdir: {n} files x {size} B = {n * size / 1e6:.0f} MB (created in {time.perf_counter() - t0:.1f} s)")

    async def run(label: str, target: SSHTarget, root: str) -> None:
        async with SSHTransport(target) as t:
            for method in ("rsync", "sftp"):
                dst = f"{root}/wd-{method}"
                for phase in ("first sync", "no-change re-sync"):
                    t0 = time.perf_counter()
                    st = await sync_to_remote(t, src, dst, [], method=method)
                    dt = time.perf_counter() - t0
                    print(f"  [{label}] {method:5s} {phase:18s} {dt:6.2f} s  files={st.files} "
                          f"bytes={st.bytes / 1e6:.1f} MB  ({st.bytes / 1e6 / dt:.0f} MB/s)")
                await t.run(["rm", "-rf", dst])

    priv, pub = make_keypair(tmp / "keys")
    async with FakeSSHHost(tmp / "synchost", "127.0.0.2", pub) as h:
        await run("asyncssh fake host", SSHTarget(h.host, h.port, "skyd", str(priv)), str(h.home))
    if use_sshd:
        from tests.fakes.sshd import real_sshd, unavailable_reason

        why = unavailable_reason()
        if why:
            print(f"  [real sshd] skipped: {why}")
            return
        # sshd reads the test user's keys from here: a dir of our own under /var/tmp, never
        # a chmod of a shared /tmp.
        work = Path(tempfile.mkdtemp(prefix="skyd-sshd-", dir="/var/tmp"))
        os.chmod(work, 0o755)
        try:
            async with real_sshd(work) as s:
                await run("real OpenSSH", SSHTarget(s.host, s.port, s.user, str(s.key)), str(s.home))
        finally:
            import shutil

            shutil.rmtree(work, ignore_errors=True)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=10_240)
    ap.add_argument("--deploys", type=int, default=5)
    ap.add_argument("--sshd", action="store_true", help="also sync to a real OpenSSH (root)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="skyd-sshbench-"))
    os.environ["SKYD_HOME"] = str(tmp / "skyd")
    os.environ["SKYD_CONFIG_DIR"] = str(tmp / "config")
    try:
        await bench_deploy(tmp, a.deploys)
        await bench_sync(tmp, a.files, a.size, a.sshd)
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    anyio.run(main)
