"""Container images (image_id: docker:<image>) vs no container, through the real CLI, a
warm daemon (subprocess) and real podman (runc), side by side in one run.

    .venv/bin/python bench/container_bench.py [--repeat 5]

1. launch -> first output line of a new cluster, with the image already on the node, vs
   the same task without a container: on `local` and on an SSH pool (an asyncssh fake host
   on 127.0.0.x; its commands run as this user, so it shares podman's image store);
2. `skyd exec CLUSTER 'echo FIRST'` -> first output line on a container cluster vs a plain
   one (the agent runs inside the container: a job costs no `podman exec`); target: the
   container adds <= 50 ms;
3. for reference, one transport command: `podman exec` into the container vs a plain
   subprocess (what every deploy/status step of a container node pays);
4. with ``--bucket-mount``: launch -> first line of a task reading a bucket MOUNT (moto's S3
   on 127.0.0.1, rclone on the node) on `local`, container vs none (the container's extra
   cost: the destination made a shared bind, bound rslave). Needs rclone and /dev/fuse.
Needs podman + runc + busybox-static (the test image is built locally: no internet).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ssh_cluster_bench import run_until_line  # noqa: E402


def fmt(xs: list[float]) -> str:
    return (f"median {statistics.median(xs) * 1000:.0f} ms (min {min(xs) * 1000:.0f},"
            f" max {max(xs) * 1000:.0f}, n={len(xs)})")


async def transport_overhead(repeat: int, image: str) -> tuple[list[float], list[float]]:
    from skyd.transports import container_runtime as crt
    from skyd.transports.container import ContainerTransport
    from skyd.transports.local import LocalTransport

    nd = tempfile.mkdtemp(prefix="skyd-ctr-bench-")
    t = LocalTransport(nd)
    spec = crt.ContainerRequest(image=image, cluster_tag=f"bench-{os.getpid()}").spec(rank=0, node_dir=nd, home=nd)
    await crt.ensure(t, spec, lambda _m: None, want="podman")
    ct = ContainerTransport(t, spec)
    plain, inside = [], []
    try:
        for _ in range(repeat * 4):
            t0 = time.perf_counter()
            await t.run("true")
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await ct.run("true")
            inside.append(time.perf_counter() - t0)
    finally:
        await crt.remove(t, spec)
        shutil.rmtree(nd, ignore_errors=True)
    return plain, inside


async def bucket_mount_rows(repeat: int, ctr: list[str], tmp: Path) -> dict[str, list[float]]:
    """launch -> first line reading a bucket MOUNT, container vs none (local), interleaved."""
    rows: dict[str, list[float]] = {}
    y = tmp / "mount.yaml"
    y.write_text("file_mounts:\n  /ckpt:\n    source: s3://skyd-ctr-bench\n    mode: MOUNT\n"
                 "run: cat /ckpt/hello.txt\n")
    for i in range(repeat):
        for label, extra in (("no container", []), ("container", ctr)):
            name = f"m{i}"
            f, _t, _o = await run_until_line(["launch", "-y", "-c", name, "--infra", "local", *extra, str(y)],
                                             "from-the-bucket")
            rows.setdefault(f"local bucket MOUNT, {label}", []).append(f)
            await run_until_line(["down", "-y", name], "")
    return rows


async def main(repeat: int, bucket_mount: bool = False, only_bucket_mount: bool = False) -> None:
    from tests.fakes import containers as fc

    why = fc.missing()
    if why:
        raise SystemExit(f"container bench skipped: {why}")
    image = fc.python_image()
    tmp = Path(tempfile.mkdtemp(prefix="skyd-ctrbench-"))
    os.environ["SKYD_HOME"] = str(tmp / "skyd")
    os.environ["SKYD_CONFIG_DIR"] = str(tmp / "config")
    os.environ["SKYD_SOCKET"] = str(Path(tempfile.mkdtemp(prefix="skyd-", dir="/tmp")) / "s.sock")
    os.environ.pop("SKYD_CATALOG_DIR", None)
    from tests.fakes.sshhost import FakeSSHHost, make_keypair, write_pools
    from tests.support.ssh_e2e import daemon

    moto = None
    if bucket_mount:
        from tests.fakes.awsproxy import start_moto

        moto, url = start_moto()
        import boto3

        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket="skyd-ctr-bench")
        s3.put_object(Bucket="skyd-ctr-bench", Key="hello.txt", Body=b"from-the-bucket\n")
        os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_DEFAULT_REGION": "us-east-1", "SKYD_AWS_LOOPBACK_ONLY": "1",
                           "AWS_ENDPOINT_URL": url})
    print(f"load average before: {open('/proc/loadavg').read().split()[:3]}")
    priv, pub = make_keypair(tmp / "keys")
    ctr = ["--image-id", f"docker:{image}"]
    try:
        async with contextlib.AsyncExitStack() as stack:
            host = await stack.enter_async_context(FakeSSHHost(tmp / "h", "127.0.0.2", pub))
            host2 = await stack.enter_async_context(FakeSSHHost(tmp / "h2", "127.0.0.3", pub))
            write_pools(Path(os.environ["SKYD_CONFIG_DIR"]), {"pool": [host], "pool2": [host2]}, priv)
            async with daemon(SKYD_CONTAINER_RUNTIME="podman"):
                await run_until_line(["launch", "-y", "-c", "warm", "--infra", "local", "echo up"], "up")  # catalog, zipapp
                await run_until_line(["down", "-y", "warm"], "")
                if bucket_mount:
                    print("launch -> first output line reading a bucket MOUNT (new cluster):")
                    for k, xs in (await bucket_mount_rows(repeat, ctr, tmp)).items():
                        print(f"  {k}: {fmt(xs)}")
                if only_bucket_mount:
                    return
                rows: dict[str, list[float]] = {}
                for i in range(repeat):  # interleaved: load changes hit every row alike
                    for infra in ("local", "ssh/pool"):
                        for label, extra in (("no container", []), ("container (image on the node)", ctr)):
                            name = f"b{i}"
                            f, _t, _o = await run_until_line(
                                ["launch", "-y", "-c", name, "--infra", infra, *extra, "echo FIRST"], "FIRST")
                            rows.setdefault(f"{infra:9s} {label}", []).append(f)
                            await run_until_line(["down", "-y", name], "")
                print("launch -> first output line (new cluster):")
                for k, xs in rows.items():
                    print(f"  {k}: {fmt(xs)}")
                print("skyd exec -> first output line (existing cluster), interleaved:")
                for label, plain_at, ctr_at in (("local", "local", "local"), ("ssh pool", "ssh/pool", "ssh/pool2")):
                    execs: dict[str, list[float]] = {}
                    for name, infra, extra in (("plain", plain_at, []), ("ctr", ctr_at, ctr)):
                        await run_until_line(["launch", "-y", "-c", name, "--infra", infra, *extra, "echo up"], "up")
                    for _ in range(repeat * 2):  # interleaved: load changes hit both alike
                        for name in ("plain", "ctr"):
                            f, _t, _o = await run_until_line(["exec", name, "echo FIRST"], "FIRST")
                            execs.setdefault(name, []).append(f)
                    await run_until_line(["down", "-y", "-a"], "")
                    d = statistics.median(execs["ctr"]) - statistics.median(execs["plain"])
                    print(f"  {label:8s} no container: {fmt(execs['plain'])}")
                    print(f"  {label:8s} container:    {fmt(execs['ctr'])}")
                    print(f"  {label:8s} container overhead: {d * 1000:+.0f} ms (target <= 50 ms)")
        plain, inside = await transport_overhead(repeat, image)
        print(f"one transport command: plain subprocess {fmt(plain)}; podman exec {fmt(inside)}")
    finally:
        print(f"load average after: {open('/proc/loadavg').read().split()[:3]}")
        if moto is not None:
            moto.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--bucket-mount", action="store_true", help="add the bucket MOUNT rows (moto + rclone)")
    ap.add_argument("--only-bucket-mount", action="store_true", help="only the bucket MOUNT rows")
    a = ap.parse_args()
    anyio.run(main, a.repeat, a.bucket_mount or a.only_bucket_mount, a.only_bucket_mount)
