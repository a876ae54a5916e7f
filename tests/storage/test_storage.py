"""Bucket file_mounts and `skyd storage` end to end: moto's S3 server on 127.0.0.1, a real
daemon subprocess, `local` nodes, the real CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.aws import CREDS
from tests.support.pipeline import Env, cli, module_env, write


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, moto: str) -> Iterator[Env]:
    with module_env(tmp_path_factory, AWS_ENDPOINT_URL=moto, **CREDS) as e:
        yield e


def _keys(s3: Any, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def _buckets(s3: Any) -> set[str]:
    return {b["Name"] for b in s3.list_buckets()["Buckets"]}


def test_copy_prefix_onto_two_nodes(env: Env, s3: Any, tmp_path: Path) -> None:
    s3.create_bucket(Bucket="skyd-src")
    s3.put_object(Bucket="skyd-src", Key="data/a.txt", Body=b"alpha\n")
    s3.put_object(Bucket="skyd-src", Key="data/sub/b.txt", Body=b"beta\n")
    s3.put_object(Bucket="skyd-src", Key="other/no.txt", Body=b"no\n")
    y = write(tmp_path / "t.yaml", "resources: {infra: local}\nnum_nodes: 2\nfile_mounts:\n  ~/d: s3://skyd-src/data\n"
              "run: cat ~/d/a.txt ~/d/sub/b.txt\n")
    r = env.ok("launch", "-c", "st-copy", "-y", str(y), timeout=120)
    assert "Downloaded s3://skyd-src/data/: 2 files" in r.stdout + r.stderr
    for rank in (0, 1):
        home = env.cluster_dir("st-copy") / f"node-{rank}" / "home"
        assert (home / "d" / "a.txt").read_text() == "alpha\n"
        assert (home / "d" / "sub" / "b.txt").read_text() == "beta\n"
        assert not (home / "d" / "no.txt").exists() and not (home / "d" / "other").exists()
    env.ok("down", "-y", "st-copy")
    assert "skyd-src" in _buckets(s3)  # a source bucket is never deleted


def test_local_source_uploaded_and_removed_at_down(env: Env, s3: Any, tmp_path: Path) -> None:
    write(tmp_path / "src" / "x.txt", "ex\n")
    write(tmp_path / "src" / "deep" / "y.txt", "why\n")
    y = write(tmp_path / "t.yaml", f"""\
resources: {{infra: local}}
file_mounts:
  ~/up:
    name: skyd-upload-tmp
    source: {tmp_path / 'src'}
    mode: COPY
    persistent: false
run: cat ~/up/deep/y.txt
""")
    env.ok("launch", "-c", "st-up", "-y", str(y), timeout=120)
    assert _keys(s3, "skyd-upload-tmp") == ["deep/y.txt", "x.txt"]
    node = env.cluster_dir("st-up") / "node-0" / "home" / "up"
    assert (node / "deep" / "y.txt").read_text() == "why\n"
    rows = env.json("storage", "ls")
    assert [(r["name"], r["persistent"]) for r in rows] == [("skyd-upload-tmp", False)]
    env.ok("down", "-y", "st-up")
    assert "skyd-upload-tmp" not in _buckets(s3)
    assert env.json("storage", "ls") == []


def test_storage_ls_and_delete_only_skyd_buckets(env: Env, s3: Any, tmp_path: Path) -> None:
    s3.create_bucket(Bucket="not-made-by-skyd")
    write(tmp_path / "src" / "f.bin", "f\n")
    for n in ("skyd-keep-1", "skyd-keep-2"):
        y = write(tmp_path / f"{n}.yaml", "resources: {infra: local}\n" f"file_mounts:\n  ~/k:\n    name: {n}\n"
                  f"    source: {tmp_path / 'src'}\n    mode: COPY\nrun: 'true'\n")
        env.ok("launch", "-c", "st-keep", "-y", str(y), timeout=120)
    env.ok("down", "-y", "st-keep")
    assert {"skyd-keep-1", "skyd-keep-2"} <= _buckets(s3)  # persistent: kept at down
    assert sorted(r["name"] for r in env.json("storage", "ls")) == ["skyd-keep-1", "skyd-keep-2"]
    r = cli("storage", "delete", "not-made-by-skyd")
    assert r.returncode == 3 and "not-made-by-skyd" in r.stderr, r.stderr
    assert "not-made-by-skyd" in _buckets(s3)
    env.ok("storage", "delete", "skyd-keep-1")
    assert "skyd-keep-1" not in _buckets(s3)
    env.ok("storage", "delete", "-a")
    assert "skyd-keep-2" not in _buckets(s3)
    assert "not-made-by-skyd" in _buckets(s3)
    assert env.json("storage", "ls") == []


@pytest.mark.parametrize(("mount", "says"), [
    ("s3://no-such-bucket-here/x", "does not exist"),
    ("s3://Bad_Name/x", "not a valid bucket name"),
    ("{source: s3://no-such-bucket-here, mode: MOUNT}", "does not exist"),
    ("{name: ab, source: /tmp, mode: COPY}", "3 to 63"),
])
def test_bad_input_before_provisioning(env: Env, s3: Any, tmp_path: Path, mount: str,
                                       says: str) -> None:
    y = write(tmp_path / "bad.yaml", f"resources: {{infra: local}}\nfile_mounts:\n  ~/d: {mount}\nrun: 'true'\n")
    r = cli("launch", "-c", "st-bad", "-y", str(y))
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and "file_mounts.~/d" in r.stderr, r.stderr
    assert env.status("st-bad") is None
    assert not env.cluster_dir("st-bad").exists()


def test_no_credentials_refused_before_provisioning(tmp_path_factory: pytest.TempPathFactory,
                                                    moto: str, monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:
    for k in CREDS:
        monkeypatch.delenv(k, raising=False)
    creds_less = {"AWS_ENDPOINT_URL": moto}
    with module_env(tmp_path_factory, **creds_less) as e:
        y = write(tmp_path_factory.mktemp("nc") / "t.yaml",
                  "resources: {infra: local}\nfile_mounts:\n  ~/d: s3://skyd-src/data\nrun: 'true'\n")
        r = cli("launch", "-c", "st-nocreds", "-y", str(y))
        assert r.returncode == 5, r.stderr
        assert "credentials" in r.stderr.lower()
        assert e.status("st-nocreds") is None
        assert json.loads(e.ok("storage", "ls", "-o", "json").stdout) == []


def test_invalid_bucket_name_refused_at_plan_time(env: Env, tmp_path: Path) -> None:
    y = write(tmp_path / "bad.yaml", "resources: {infra: local}\nfile_mounts:\n"
              "  ~/d: {name: 192.168.1.1, source: /tmp, mode: COPY}\nrun: 'true'\n")
    r = cli("launch", "--dryrun", "-c", "st-dry", str(y))
    assert r.returncode == 2, r.stderr
    assert "IP address" in r.stderr and "file_mounts.~/d.name" in r.stderr, r.stderr


def test_managed_job_gets_the_copy(env: Env, s3: Any, tmp_path: Path) -> None:
    import time

    if "skyd-src" not in _buckets(s3):
        s3.create_bucket(Bucket="skyd-src")
    s3.put_object(Bucket="skyd-src", Key="mj/m.txt", Body=b"managed-copy\n")
    y = write(tmp_path / "mj.yaml", "name: st-mj\nresources: {infra: local}\n"
              "file_mounts:\n  ~/d: s3://skyd-src/mj\nrun: cat ~/d/m.txt\n")
    r = cli("jobs", "launch", "-d", "-o", "json", str(y))
    assert r.returncode == 0, r.stderr
    jid = str(json.loads(r.stdout)["job_id"])
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        out = cli("jobs", "logs", jid, "--no-follow").stdout
        if "managed-copy" in out:
            break
        time.sleep(0.5)
    assert "managed-copy" in out


def test_mount_on_an_infra_that_cannot_mount_refused_before_provisioning(
        env: Env, s3: Any, tmp_path: Path) -> None:
    if "skyd-src" not in _buckets(s3):
        s3.create_bucket(Bucket="skyd-src")
    y = write(tmp_path / "k.yaml", "resources: {infra: aws}\nfile_mounts:\n"
              "  ~/d: {source: s3://skyd-src, mode: MOUNT}\nrun: 'true'\n")
    r = cli("launch", "-c", "st-aws", "-y", str(y))
    assert r.returncode == 2, r.stderr
    assert "file_mounts.~/d" in r.stderr and "'aws'" in r.stderr, r.stderr
    assert "local" in r.stderr  # the infras that can mount are named
    assert env.status("st-aws") is None
