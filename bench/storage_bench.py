"""COPY from S3 (moto's server on 127.0.0.1) onto 4 `local` nodes through the real CLI,
daemon and node agents, beside `rclone copy` of the same data (when rclone is installed).

    .venv/bin/python bench/storage_bench.py [--small 10000] [--large-mb 1024] [--nodes 4]

- small: N objects of 1 KiB under one prefix; large: one object of --large-mb MB.
- skyd: `skyd launch` of a task whose only file mount is the prefix, timed from the
  launch log's "Downloaded ... in Xs" (bucket -> the daemon's staging dir) and "Copied
  ... in Ys" (staging -> every node in parallel) lines.
- rclone: `rclone copy` of the same prefix into one local directory (one node's worth),
  then into --nodes directories at once (one rclone per node, as a node-side copy would).
- mount (``--cases mount``): the large object read through a MOUNT (rclone, FUSE) on
  --nodes nodes at once: each node's job times ``cat`` of the file to /dev/null.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.launch_bench import SKYD, bench_daemon  # noqa: E402
from tests.fakes.awsproxy import start_moto  # noqa: E402

CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
         "AWS_DEFAULT_REGION": "us-east-1", "SKYD_AWS_LOOPBACK_ONLY": "1"}


def _fill(s3: object, n_small: int, large_mb: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    s3.create_bucket(Bucket="bench-small")  # type: ignore[attr-defined]
    s3.create_bucket(Bucket="bench-large")  # type: ignore[attr-defined]
    body = b"x" * 1024
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda i: s3.put_object(Bucket="bench-small",  # type: ignore[attr-defined]
                                            Key=f"d/{i // 100}/{i}.txt", Body=body),
                    range(n_small)))
    with tempfile.NamedTemporaryFile() as f:
        chunk = os.urandom(1024 * 1024)
        for _ in range(large_mb):
            f.write(chunk)
        f.flush()
        s3.upload_file(f.name, "bench-large", "big/blob.bin")  # type: ignore[attr-defined]


def _launch(env: dict[str, str], name: str, nodes: int, uri: str | None, d: Path) -> tuple[float, str]:
    y = d / f"{name}.yaml"
    mounts = f"file_mounts:\n  ~/d: {uri}\n" if uri else ""
    y.write_text(f"resources: {{infra: local}}\nnum_nodes: {nodes}\n{mounts}run: 'true'\n")
    t0 = time.monotonic()
    r = subprocess.run([SKYD, "launch", "-y", "-c", name, str(y)], env=env, capture_output=True,
                       text=True, timeout=1800)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(r.stdout + r.stderr)
    subprocess.run([SKYD, "down", "-y", name], env=env, capture_output=True, timeout=300)
    return dt, r.stdout + r.stderr


def _rclone(url: str, uri: str, dests: list[Path]) -> float | None:
    if shutil.which("rclone") is None:
        return None
    bucket_path = uri.removeprefix("s3://")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
           "RCLONE_CONFIG_M_TYPE": "s3", "RCLONE_CONFIG_M_PROVIDER": "Other",
           "RCLONE_CONFIG_M_ENDPOINT": url, "RCLONE_CONFIG_M_ACCESS_KEY_ID": "testing",
           "RCLONE_CONFIG_M_SECRET_ACCESS_KEY": "testing", "RCLONE_CONFIG_M_REGION": "us-east-1",
           "RCLONE_CONFIG_M_FORCE_PATH_STYLE": "true"}
    t0 = time.monotonic()
    procs = [subprocess.Popen(["rclone", "copy", "--transfers", "16", f"m:{bucket_path}", str(d)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for d in dests]
    for p in procs:
        _, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(err[-2000:])
    return time.monotonic() - t0


def _mount_case(env: dict[str, str], nodes: int, large_mb: int, d: Path) -> None:
    y = d / "mount.yaml"
    y.write_text(f"resources: {{infra: local}}\nnum_nodes: {nodes}\nfile_mounts:\n"
                 "  ~/m: {source: s3://bench-large/big, mode: MOUNT}\n"
                 "run: |\n  t0=$(date +%s.%N); cat ~/m/blob.bin > /dev/null; t1=$(date +%s.%N)\n"
                 "  echo \"mount-read $SKYPILOT_NODE_RANK $t0 $t1\"\n")
    t0 = time.monotonic()
    r = subprocess.run([SKYD, "launch", "-y", "-c", "sb-mount", str(y)], env=env,
                       capture_output=True, text=True, timeout=1800)
    total = time.monotonic() - t0
    if r.returncode != 0:
        log = Path(env["SKYD_HOME"]) / "logs" / "daemon.log"
        tail = log.read_text()[-6000:] if log.exists() else ""
        subprocess.run([SKYD, "down", "-y", "sb-mount"], env=env, capture_output=True, timeout=300)
        raise RuntimeError(r.stdout[-3000:] + r.stderr + "\n--- daemon log ---\n" + tail)
    subprocess.run([SKYD, "down", "-y", "sb-mount"], env=env, capture_output=True, timeout=300)
    spans = [(float(a), float(b)) for a, b in
             re.findall(r"mount-read \d+ ([\d.]+) ([\d.]+)", r.stdout + r.stderr)]
    if not spans:
        raise RuntimeError(r.stdout + r.stderr)
    wall = max(b for _, b in spans) - min(a for a, _ in spans)
    mb = large_mb * 1024 * 1024 / 1e6
    each = ", ".join(f"{b - a:.2f}s" for a, b in spans)
    print(f"skyd MOUNT read {mb:.1f} MB on {len(spans)} nodes at once: {wall:.2f}s"
          f" ({mb / wall:.1f} MB/s per node, {mb * len(spans) / wall:.1f} MB/s delivered;"
          f" per node {each}); launch incl. mounts {total:.2f}s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=10000)
    ap.add_argument("--large-mb", type=int, default=1024)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--cases", default="copy,mount", help="copy, mount or both")
    a = ap.parse_args()
    wanted = set(a.cases.split(","))
    server, url = start_moto()
    import boto3

    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    work = Path(tempfile.mkdtemp(prefix="skyd-sbench-"))
    try:
        _fill(s3, a.small, a.large_mb)
        os.environ.update({**CREDS, "AWS_ENDPOINT_URL": url})
        cases = [("small", "s3://bench-small/d", a.small, a.small * 1024),
                 ("large", "s3://bench-large/big", 1, a.large_mb * 1024 * 1024)]
        with bench_daemon() as env:
            if "mount" in wanted:
                _mount_case(env, a.nodes, a.large_mb, work)
            for label, uri, files, size in cases if "copy" in wanted else []:
                dt, out = _launch(env, f"sb-{label}", a.nodes, uri, work)
                m = re.search(r"Downloaded \S+: \d+ files, [\d.]+ MB in ([\d.]+)s", out)
                dl = float(m.group(1)) if m else float("nan")
                m2 = re.search(r"Copied \S+ -> \S+ on \d+ node\(s\) in ([\d.]+)s", out)
                sync = float(m2.group(1)) if m2 else float("nan")
                total = dl + sync
                print(f"skyd {label}: {files} files, {size / 1e6:.1f} MB; download {dl:.2f}s"
                      f" ({size / 1e6 / dl:.1f} MB/s, {files / dl:.0f} files/s); onto"
                      f" {a.nodes} nodes {sync:.2f}s; bucket -> {a.nodes} nodes {total:.2f}s"
                      f" ({size / 1e6 / total:.1f} MB/s, {files / total:.0f} files/s per node)")
                for n in (1, a.nodes):
                    dests = [work / f"rclone-{label}-{n}-{i}" for i in range(n)]
                    rc = _rclone(url, uri, dests)
                    if rc is None:
                        print(f"rclone {label}: not installed")
                        break
                    print(f"rclone copy {label} ({n} destination(s) at once): {rc:.2f}s"
                          f" ({size / 1e6 / rc:.1f} MB/s, {files / rc:.0f} files/s per destination)")
                    for d in dests:
                        shutil.rmtree(d, ignore_errors=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
