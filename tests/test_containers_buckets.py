"""Bucket file mounts with image_id docker:<image> on `local` (moto's S3 on 127.0.0.1,
real podman): COPY mounts at an absolute path and under ~ are visible inside the task's
container at the paths the task names; MOUNT is refused before anything is made."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import containers as fc
from tests.fakes.awsproxy import start_moto
from tests.test_aws_support import CREDS, REGION
from tests.test_pipeline_support import Env, cli, module_env, write

pytestmark = pytest.mark.skipif(fc.missing() is not None, reason=str(fc.missing()))


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    server, url = start_moto()
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3(moto: str) -> Any:
    import boto3

    return boto3.client("s3", region_name=REGION, endpoint_url=moto,
                        aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, moto: str) -> Iterator[Env]:
    fc.python_image()
    with module_env(tmp_path_factory, AWS_ENDPOINT_URL=moto, **CREDS) as e:
        yield e
    left = fc.bound_under(e.home)
    fc.remove_bound_under(e.home)
    assert left == [], left


def test_copy_buckets_are_visible_in_the_container_and_mount_is_refused(
        env: Env, s3: Any, tmp_path: Path) -> None:
    s3.create_bucket(Bucket="skyd-ctr-src")
    s3.put_object(Bucket="skyd-ctr-src", Key="data/a.txt", Body=b"alpha\n")
    y = write(tmp_path / "t.yaml",
              f"resources:\n  infra: local\n  image_id: docker:{fc.PY_IMAGE}\n"
              "file_mounts:\n  /datasets: s3://skyd-ctr-src/data\n  ~/d: s3://skyd-ctr-src/data\n"
              "run: test -f /run/.containerenv && cat /datasets/a.txt ~/d/a.txt\n")
    r = env.ok("launch", "-c", "ctr-s3", "-y", str(y), timeout=180)
    assert r.stdout.count("alpha") == 2, r.stdout + r.stderr
    env.ok("down", "-y", "ctr-s3", timeout=120)
    y = write(tmp_path / "m.yaml",
              f"resources:\n  infra: local\n  image_id: docker:{fc.PY_IMAGE}\n"
              "file_mounts:\n  /ckpt:\n    source: s3://skyd-ctr-src\n    mode: MOUNT\nrun: echo never\n")
    r = cli("launch", "-c", "ctr-s3m", "-y", str(y), timeout=120)
    assert r.returncode == 2 and "file_mounts./ckpt" in r.stderr and "mode: COPY" in r.stderr, r.stderr
    assert env.status("ctr-s3m") is None
