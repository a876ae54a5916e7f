"""MOUNT and MOUNT_CACHED end to end: moto's S3 server on 127.0.0.1, a real daemon, `local`
(and `fakecloud`) sandboxes whose buckets are really mounted with rclone through FUSE; a
managed job that checkpoints into a mounted bucket, is preempted and resumes."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.fakes import preemptible
from tests.support.aws import CREDS
from tests.support.buckets import fuse_mounts_under, fuse_problem, s3_object
from tests.support.pipeline import Env, cli, module_env, wait_for, write

pytestmark = pytest.mark.skipif(fuse_problem() is not None, reason=str(fuse_problem()))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, moto: str) -> Iterator[Env]:
    with module_env(tmp_path_factory, AWS_ENDPOINT_URL=moto,
                    SKYD_EXTRA_PLUGINS="tests.fakes.preemptible", SKYD_JOBS_POLL="0.3",
                    SKYD_JOBS_BACKOFF="0.3", **CREDS) as e:
        yield e


def test_mount_reads_and_writes_then_down_unmounts(env: Env, s3: Any, tmp_path: Path) -> None:
    s3.create_bucket(Bucket="skyd-mnt")
    s3.put_object(Bucket="skyd-mnt", Key="in/hello.txt", Body=b"from-the-bucket\n")
    y = write(tmp_path / "m.yaml", """\
resources: {infra: local}
file_mounts:
  ~/b:
    source: s3://skyd-mnt
    mode: MOUNT
  ~/c:
    source: s3://skyd-mnt/in
    mode: MOUNT_CACHED
run: |
  cat ~/b/in/hello.txt
  mkdir -p ~/b/out && echo written-by-job > ~/b/out/result.txt
  echo cached-write > ~/c/cached.txt
""")
    r = env.ok("launch", "-c", "st-mnt", "-y", str(y), timeout=120)
    out = r.stdout + r.stderr
    assert "from-the-bucket" in out, out
    assert "s3://skyd-mnt/ mounted at ~/b" in out and "(MOUNT, rclone)" in out, out
    assert "testing" not in out  # the secret stays in the node's 0600 config file
    # MOUNT: the write is in the bucket once the file is closed (the job has ended).
    assert s3_object(s3, "skyd-mnt", "out/result.txt") == b"written-by-job\n"
    # MOUNT_CACHED: written back from the node's cache shortly after the job ended.
    assert wait_for(lambda: s3_object(s3, "skyd-mnt", "in/cached.txt"), timeout=20, interval=0.2) == b"cached-write\n"
    cdir = env.cluster_dir("st-mnt")
    conf = cdir / "node-0" / ".skyd" / "rclone.conf"
    assert conf.stat().st_mode & 0o777 == 0o600
    assert len(fuse_mounts_under(cdir)) == 2
    # A cached write just before `down` is uploaded before the mount goes.
    env.ok("exec", "st-mnt", "echo late > ~/c/late.txt", timeout=60)
    env.ok("down", "-y", "st-mnt", timeout=90)
    assert fuse_mounts_under(cdir) == []
    assert s3_object(s3, "skyd-mnt", "in/late.txt") == b"late\n"
    assert s3_object(s3, "skyd-mnt", "in/hello.txt") == b"from-the-bucket\n"  # never deleted


def test_checkpoint_in_mounted_bucket_survives_preemption(env: Env, s3: Any,
                                                          tmp_path: Path) -> None:
    s3.create_bucket(Bucket="skyd-ckpt")
    y = write(tmp_path / "ck.yaml", """\
name: st-ckpt
resources: {infra: fakecloud, use_spot: true}
file_mounts:
  ~/ckpt:
    source: s3://skyd-ckpt
    mode: MOUNT
run: |
  start=0
  if [ -f ~/ckpt/step ]; then start=$(cat ~/ckpt/step); echo "resumed from step $start"; fi
  for i in $(seq $((start + 1)) 40); do
    echo $i > ~/ckpt/step.tmp && mv ~/ckpt/step.tmp ~/ckpt/step
    echo "step $i"
    sleep 0.25
  done
  echo training done
""")
    r = cli("jobs", "launch", "-d", "-o", "json", str(y))
    assert r.returncode == 0, r.stderr
    jid = str(json.loads(r.stdout)["job_id"])

    def step() -> int:
        b = s3_object(s3, "skyd-ckpt", "step")
        return int(b) if b else 0

    assert wait_for(lambda: step() >= 3, timeout=90, interval=0.2), "no checkpoint reached the bucket"
    from skyd import sdk

    cluster = sdk.get(f"/v1/jobs/{jid}")["cluster"]
    assert anyio.run(preemptible.PreemptibleProvisioner().preempt, cluster) > 0
    at = step()

    def finished() -> str | None:
        s = str(sdk.get(f"/v1/jobs/{jid}")["status"])
        return s if s in ("SUCCEEDED", "FAILED", "FAILED_SETUP", "CANCELLED",
                          "FAILED_NO_RESOURCE", "FAILED_CONTROLLER") else None

    assert wait_for(finished, timeout=120, interval=0.2) == "SUCCEEDED"
    job = sdk.get(f"/v1/jobs/{jid}")
    assert job["recoveries"] == 1
    logs = cli("jobs", "logs", jid, "--no-follow").stdout
    resumed = [ln for ln in logs.splitlines() if "resumed from step" in ln]
    assert resumed, logs
    n = int(resumed[-1].rsplit(" ", 1)[1])
    assert n >= at and "training done" in logs
    after = logs.split(resumed[-1], 1)[1].splitlines()
    assert not any(ln.rstrip().endswith("step 1") for ln in after)  # no restart from 0
    assert step() == 40
    assert wait_for(lambda: fuse_mounts_under(env.cluster_dir(cluster)) == [], timeout=30, interval=0.2)


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
def test_absolute_bucket_destinations_on_local(env: Env, s3: Any, tmp_path: Path) -> None:
    """A bucket MOUNT (rclone FUSE in the sandbox) and a COPY at absolute paths are at those
    paths in the job's mount namespace; nothing is made at them on this machine."""
    import uuid

    tag = uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket="skyd-abs")
    s3.put_object(Bucket="skyd-abs", Key="in/hello.txt", Body=b"abs-bucket\n")
    y = write(tmp_path / "a.yaml", f"""\
resources: {{infra: local}}
file_mounts:
  /bkt{tag}:
    source: s3://skyd-abs
    mode: MOUNT
  /bcopy{tag}:
    source: s3://skyd-abs/in
    mode: COPY
run: |
  cat /bkt{tag}/in/hello.txt /bcopy{tag}/hello.txt
  echo from-ns > /bkt{tag}/ns.txt
""")
    r = env.ok("launch", "-c", "st-abs", "-y", str(y), timeout=120)
    assert r.stdout.count("abs-bucket") == 2, r.stdout + r.stderr
    assert s3_object(s3, "skyd-abs", "ns.txt") == b"from-ns\n"
    assert not os.path.lexists(f"/bkt{tag}") and not os.path.lexists(f"/bcopy{tag}")
    cdir = env.cluster_dir("st-abs")
    env.ok("down", "-y", "st-abs", timeout=90)
    assert fuse_mounts_under(cdir) == []
