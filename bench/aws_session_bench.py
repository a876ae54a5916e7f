"""What opening an AWS client costs the daemon in a fresh botocore session: with the
process's shared botocore loader (skyd.clouds.aws.session.with_shared_loader) against a
loader of the session's own, as every session had before. No network: the clients are
opened and closed (endpoint 127.0.0.1:9, never dialled).

    .venv/bin/python bench/aws_session_bench.py [-n 8]

Each round opens a fresh session and its S3 and EC2 clients, as an S3 store opened for one
request (skyd.storage.s3.S3Store) or a provisioner does; CPU-s per round, median and max.
The first round of each kind is reported apart (it reads the JSON for the process).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


async def _round(shared: bool) -> float:
    from aiobotocore.session import get_session

    from skyd.clouds.aws.session import with_shared_loader

    t = time.process_time()
    s = get_session()
    if shared:
        with_shared_loader(s)
    for service in ("s3", "ec2"):
        async with s.create_client(service, region_name="us-east-1"):
            pass
    return time.process_time() - t


async def main(n: int) -> None:
    os.environ.update(AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_EC2_METADATA_DISABLED="true")
    await _round(False)  # imports
    rows: dict[str, list[float]] = {"own loader": [], "shared loader": []}
    first = {"shared loader": await _round(True)}
    for _ in range(n):  # alternating, so machine noise hits both alike
        rows["own loader"].append(await _round(False))
        rows["shared loader"].append(await _round(True))
    print(f"fresh session + S3 and EC2 clients, {n} rounds, CPU-s:")
    print(f"  shared loader, first of the process: {first['shared loader']:.3f}")
    for k, v in rows.items():
        print(f"  {k:14s} median {statistics.median(v):.3f}  max {max(v):.3f}")
    own, shared = statistics.median(rows["own loader"]), statistics.median(rows["shared loader"])
    print(f"  ratio {own / shared:.1f}x")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=8)
    asyncio.run(main(ap.parse_args().n))
