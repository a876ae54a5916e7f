"""GCS bucket file_mounts end to end: the fake GCS JSON API (tests/fakes/gcs.py) on
127.0.0.1 with its own token endpoint, a real daemon, `local` nodes, the real CLI."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.gcs import FakeGCS
from tests.support.pipeline import Env, cli, module_env, write


@pytest.fixture(scope="module")
def gcs() -> Iterator[FakeGCS]:
    g = FakeGCS().start()
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, gcs: FakeGCS) -> Iterator[Env]:
    base = tmp_path_factory.mktemp("gcs")
    creds = gcs.service_account_file(base / "sa.json")
    (base / "gcloud").mkdir()
    with module_env(tmp_path_factory, GOOGLE_APPLICATION_CREDENTIALS=str(creds),
                    SKYD_GCS_URL=gcs.url, SKYD_GCP_COMPUTE_URL=gcs.url + "/compute/v1",
                    CLOUDSDK_CONFIG=str(base / "gcloud")) as e:
        yield e


def test_copy_gs_prefix_onto_two_nodes(env: Env, gcs: FakeGCS, tmp_path: Path) -> None:
    gcs.buckets["skyd-gsrc"] = {"data/a.txt": b"alpha\n", "data/sub/b.txt": b"beta\n",
                                "data/c.txt": b"gamma\n", "other/no.txt": b"no\n"}
    gcs.page_size = 2  # the listing takes two pages
    try:
        y = write(tmp_path / "t.yaml", "resources: {infra: local}\nnum_nodes: 2\nfile_mounts:\n"
                  "  ~/d: gs://skyd-gsrc/data\nrun: cat ~/d/a.txt ~/d/sub/b.txt\n")
        r = env.ok("launch", "-c", "gs-copy", "-y", str(y), timeout=120)
    finally:
        gcs.page_size = 1000
    assert "Downloaded gs://skyd-gsrc/data/: 3 files" in r.stdout + r.stderr
    for rank in (0, 1):
        home = env.cluster_dir("gs-copy") / f"node-{rank}" / "home"
        assert (home / "d" / "sub" / "b.txt").read_text() == "beta\n"
        assert (home / "d" / "c.txt").read_text() == "gamma\n"
        assert not (home / "d" / "no.txt").exists()
    env.ok("down", "-y", "gs-copy")
    assert "skyd-gsrc" in gcs.buckets  # a source bucket is never deleted


def test_local_source_uploaded_to_gcs_and_removed_at_down(env: Env, gcs: FakeGCS,
                                                          tmp_path: Path) -> None:
    big = bytes(range(256)) * (9 * 4096 + 7)  # > 8 MiB: a resumable upload in two pieces
    write(tmp_path / "src" / "x.txt", "ex\n")
    (tmp_path / "src" / "deep").mkdir()
    (tmp_path / "src" / "deep" / "big.bin").write_bytes(big)
    y = write(tmp_path / "t.yaml", f"""\
resources: {{infra: local}}
file_mounts:
  ~/up:
    name: skyd-gs-upload
    source: {tmp_path / 'src'}
    store: gcs
    mode: COPY
    persistent: false
run: cat ~/up/x.txt
""")
    env.ok("launch", "-c", "gs-up", "-y", str(y), timeout=120)
    assert sorted(gcs.buckets["skyd-gs-upload"]) == ["deep/big.bin", "x.txt"]
    assert gcs.buckets["skyd-gs-upload"]["deep/big.bin"] == big
    node = env.cluster_dir("gs-up") / "node-0" / "home" / "up"
    assert (node / "deep" / "big.bin").read_bytes() == big
    rows = env.json("storage", "ls")
    assert [(r["name"], r["store"], r["persistent"]) for r in rows] == [
        ("skyd-gs-upload", "GCS", False)]
    env.ok("down", "-y", "gs-up")
    assert "skyd-gs-upload" not in gcs.buckets
    assert env.json("storage", "ls") == []


@pytest.mark.parametrize(("mount", "says", "rc"), [
    ("gs://no-such-gs-bucket/x", "bucket gs://no-such-gs-bucket does not exist", 2),
    ("{source: gs://no-such-gs-bucket, mode: MOUNT}", "does not exist", 2),
    ("gs://googly-name", "goog", 2),
])
def test_bad_gcs_input_before_provisioning(env: Env, gcs: FakeGCS, tmp_path: Path, mount: str,
                                           says: str, rc: int) -> None:
    gcs.buckets.setdefault("skyd-gsrc", {"k": b"v"})
    y = write(tmp_path / "bad.yaml",
              f"resources: {{infra: local}}\nfile_mounts:\n  ~/d: {mount}\nrun: 'true'\n")
    r = cli("launch", "-c", "gs-bad", "-y", str(y))
    assert r.returncode == rc, r.stderr
    assert says in r.stderr and "file_mounts.~/d" in r.stderr, r.stderr
    assert env.status("gs-bad") is None
    assert not env.cluster_dir("gs-bad").exists()


@pytest.mark.skipif(shutil.which("rclone") is None or not os.access("/dev/fuse", os.R_OK | os.W_OK),
                    reason="rclone or a usable /dev/fuse is missing")
def test_mount_gcs_bucket_reads_and_writes(env: Env, gcs: FakeGCS, tmp_path: Path) -> None:
    gcs.buckets["skyd-gsmnt"] = {"in/h.txt": b"gcs-hello\n"}
    y = write(tmp_path / "m.yaml", """\
resources: {infra: local}
file_mounts:
  ~/g:
    source: gs://skyd-gsmnt
    mode: MOUNT
  ~/gc:
    source: gs://skyd-gsmnt/cached
    mode: MOUNT_CACHED
run: |
  cat ~/g/in/h.txt
  echo from-job > ~/g/out.txt
  echo cached > ~/gc/c.txt
""")
    r = env.ok("launch", "-c", "gs-mnt", "-y", str(y), timeout=120)
    out = r.stdout + r.stderr
    assert "gcs-hello" in out and "gs://skyd-gsmnt/ mounted at ~/g" in out, out
    assert "PRIVATE KEY" not in out
    assert gcs.buckets["skyd-gsmnt"].get("out.txt") == b"from-job\n"
    env.ok("down", "-y", "gs-mnt", timeout=90)  # waits for the cached upload, then unmounts
    deadline = time.monotonic() + 10
    while "cached/c.txt" not in gcs.buckets["skyd-gsmnt"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert gcs.buckets["skyd-gsmnt"].get("cached/c.txt") == b"cached\n"
    with open("/proc/self/mounts") as f:
        assert not [ln for ln in f if "gs-mnt" in ln]

