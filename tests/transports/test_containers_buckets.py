"""Bucket file mounts with image_id docker:<image> on `local` (moto's S3 on 127.0.0.1,
real podman): COPY mounts at an absolute path and under ~ are visible inside the task's
container at the paths the task names; MOUNT and MOUNT_CACHED (rclone on the node, shared
into the container) read and write the bucket from inside, and `down` leaves no mount."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from skyd.errors import SkydError
from skyd.transports import container_runtime as crt
from skyd.transports.base import RunResult, command_line
from skyd.transports.fuse import bind_mounts_under, fuse_mounts_under
from skyd.transports.local import LocalTransport
from tests.fakes import containers as fc
from tests.fakes.sshd import ensure_user
from tests.fakes.unixnames import per_worker
from tests.support.aws import CREDS
from tests.support.buckets import fuse_problem, s3_object
from tests.support.pipeline import Env, cli, module_env, wait_for, write

pytestmark = pytest.mark.skipif(fc.missing() is not None, reason=str(fc.missing()))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, moto: str) -> Iterator[Env]:
    fc.python_image()
    with module_env(tmp_path_factory, AWS_ENDPOINT_URL=moto, **CREDS) as e:
        yield e
    left = fc.bound_under(e.home)
    fc.remove_bound_under(e.home)
    assert left == [], left


def test_copy_buckets_are_visible_in_the_container(
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


@pytest.mark.skipif(fuse_problem() is not None, reason=str(fuse_problem()))
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the node's runtime must be rootful)")
def test_mount_and_mount_cached_buckets_work_inside_the_container(env: Env, s3: Any, tmp_path: Path) -> None:
    s3.create_bucket(Bucket="skyd-ctr-mnt")
    s3.put_object(Bucket="skyd-ctr-mnt", Key="in/hello.txt", Body=b"from-the-bucket\n")
    y = write(tmp_path / "m.yaml",
              f"resources:\n  infra: local\n  image_id: docker:{fc.PY_IMAGE}\n"
              "file_mounts:\n"
              "  /ckpt:\n    source: s3://skyd-ctr-mnt\n    mode: MOUNT\n"
              "  ~/c:\n    source: s3://skyd-ctr-mnt/in\n    mode: MOUNT_CACHED\n"
              "run: |\n"
              "  test -f /run/.containerenv && echo in-container\n"
              "  cat /ckpt/in/hello.txt ~/c/hello.txt\n"
              "  mkdir -p /ckpt/out && echo written-in-container > /ckpt/out/r.txt\n"
              "  echo cached-in-container > ~/c/cached.txt\n")
    r = env.ok("launch", "-c", "ctr-mnt", "-y", str(y), timeout=240)
    out = r.stdout + r.stderr
    assert "in-container" in out and out.count("from-the-bucket") == 2, out
    assert "(MOUNT, rclone)" in out and "(MOUNT_CACHED, rclone)" in out, out
    assert s3_object(s3, "skyd-ctr-mnt", "out/r.txt") == b"written-in-container\n"
    assert wait_for(lambda: s3_object(s3, "skyd-ctr-mnt", "in/cached.txt"), timeout=20, interval=0.2) == b"cached-in-container\n"
    # a second job (exec) in the same container sees the bucket too
    r = env.ok("exec", "ctr-mnt", "ls /ckpt/out && echo late > ~/c/late.txt", timeout=120)
    assert "r.txt" in r.stdout, r.stdout + r.stderr
    cdir = env.cluster_dir("ctr-mnt")
    assert len(fuse_mounts_under(cdir)) == 2
    # a relaunch with the same mounts reuses them; one adding a bucket MOUNT the container
    # was not made for is refused before anything changes (it would not be visible inside)
    r = env.ok("launch", "-c", "ctr-mnt", "-y", str(y), timeout=240)
    assert "already mounted at /ckpt" in r.stdout + r.stderr and "written-in-container" not in r.stderr
    y2 = write(tmp_path / "m2.yaml", y.read_text().replace("file_mounts:\n", "file_mounts:\n"
               "  ~/n:\n    source: s3://skyd-ctr-mnt\n    mode: MOUNT\n"))
    r = cli("launch", "-c", "ctr-mnt", "-y", str(y2), timeout=120)
    assert r.returncode != 0 and "file_mounts.~/n" in r.stderr and "-c NEWNAME" in r.stderr, r.stderr
    assert len(fuse_mounts_under(cdir)) == 2
    env.ok("down", "-y", "ctr-mnt", timeout=180)
    assert s3_object(s3, "skyd-ctr-mnt", "in/late.txt") == b"late\n"  # uploaded before the unmount
    assert fuse_mounts_under(env.home) == [] and bind_mounts_under(env.home) == []
    assert s3_object(s3, "skyd-ctr-mnt", "in/hello.txt") == b"from-the-bucket\n"  # never deleted
    assert fc.bound_under(env.home) == []


class _AsUser(LocalTransport):
    """This machine as a node where skyd logs in as an unprivileged user (rootless podman)."""

    def __init__(self, node_dir: str, user: str) -> None:
        super().__init__(node_dir)
        self.user = user

    async def run(self, cmd: Any, *, input: Any = None, check: bool = False, timeout: float | None = None,
                  env: dict[str, str] | None = None, idempotent: bool = False) -> RunResult:
        p = await anyio.run_process(["runuser", "-u", self.user, "--", "/bin/sh", "-c", command_line(cmd, env)],
                                    check=False, cwd="/")
        return RunResult(p.returncode, p.stdout.decode(), p.stderr.decode())


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None,
                    reason="needs root and runuser (a test user is made)")
def test_mount_in_a_rootless_container_is_one_message_naming_the_fix(tmp_path: Path) -> None:
    user = per_worker("skydtest")
    ensure_user(user)
    d = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="skyd-rootless-"))
    try:
        shutil.chown(d, user)
        spec = crt.ContainerSpec(image="x", name="skyd-x-0", runtime=["/usr/bin/podman"],
                                 binds=[(str(d / "ckpt"), "/ckpt")], shared=[str(d / "ckpt")])
        with pytest.raises(SkydError) as ei:
            anyio.run(crt.share_binds, _AsUser(str(d), user), spec)
        assert "file_mounts /ckpt" in ei.value.message and "rootful podman" in ei.value.message
        assert "mode: COPY" in (ei.value.hint or "")
        assert bind_mounts_under(d) == []  # nothing half-made
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (shared mount points)")
def test_leak_pass_by_label_removes_the_container_and_its_shared_mount_points(tmp_path: Path) -> None:
    # a daemon killed mid-launch leaves only the label to go by (an SSH pool's forget)
    fc.python_image()
    nd = tmp_path / "node"
    nd.mkdir()
    tag = f"leak-{os.getpid()}"
    spec = crt.ContainerSpec(image=fc.PY_IMAGE, name=crt.container_name(tag, 0), binds=[(str(nd), str(nd)),
                             (str(nd / "ckpt"), "/ckpt")], auth_dir=str(nd / ".registry"), cluster_tag=tag,
                             stage_dir=str(nd), shared=[str(nd / "ckpt")])

    async def main() -> list[str]:
        t = LocalTransport(nd)
        s = await crt.ensure(t, spec, lambda _m: None, want="podman")
        assert bind_mounts_under(nd) == [str(nd / "ckpt")]
        assert await crt.remove_tagged(t, tag, s.runtime) == 1
        return (await t.run([*s.runtime, "ps", "-aq", "--filter", f"label=skyd-cluster={tag}"])).stdout.split()

    try:
        assert anyio.run(main) == []
        assert bind_mounts_under(nd) == []
    finally:
        fc.remove_bound_under(tmp_path)
        for mp in bind_mounts_under(tmp_path):
            subprocess.run(["umount", "-l", mp], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts)")
def test_down_unbinds_only_what_skyd_made(tmp_path: Path) -> None:
    # a bucket destination the node already had a file system on keeps it after `down`
    own, made = tmp_path / "disk", tmp_path / "ckpt"
    own.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "skyd-test-disk", str(own)], check=True)
    try:
        spec = crt.ContainerSpec(image="x", name="skyd-x-0", runtime=["/usr/bin/podman"],
                                 shared=[str(own), str(made)])
        t = LocalTransport(tmp_path)
        anyio.run(crt.share_binds, t, spec)
        assert sorted(bind_mounts_under(tmp_path)) == sorted([str(own), str(made)])
        anyio.run(crt.unshare_binds, t, spec)
        assert bind_mounts_under(tmp_path) == [str(own)]
    finally:
        for mp in bind_mounts_under(tmp_path):
            subprocess.run(["umount", "-l", mp], check=False)
