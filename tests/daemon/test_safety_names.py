"""Hostile names and paths touch only what they name: cluster/job names are checked where
they enter (CLI, SDK, HTTP API, YAML), every recursive delete stays inside its root, old
rows with bad names stay removable, file-mount destinations stay on the node."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyd import fsutil, names
from skyd.errors import InvalidSpecError
from tests.support.pipeline import Env, cli, module_env, write

BAD_NAMES = ["..", ".", "/", "../../x", "/abs/path", "a b", "a'b", 'a"b', "$(touch PWNED)",
             "`id`", "a;b", "a\nb", "ñame", "x" * 300, "-lead", "trail-", "1abc", "a/b",
             "x" * (names.MAX_NAME_LEN + 1), ""]
GOOD_NAMES = ["a", "my-cluster", "train.v2", "job_1", "A9", "x" * names.MAX_NAME_LEN]


def test_name_rule() -> None:
    for n in GOOD_NAMES:
        assert names.check_name(n) == n
    for n in BAD_NAMES:
        with pytest.raises(InvalidSpecError) as ei:
            names.check_name(n)
        assert ei.value.exit_code == 2
        assert "letter first" in ei.value.message and str(names.MAX_NAME_LEN) in ei.value.message
    assert names.check_optional_name(None) is None


def test_sdk_payload_refuses_bad_cluster_name() -> None:
    from skyd.sdk import payloads

    src = payloads.task_source(command="echo hi")
    with pytest.raises(InvalidSpecError) as ei:
        payloads.launch_payload(src, cluster_name="../../x")
    assert ei.value.field == "cluster_name"
    with pytest.raises(InvalidSpecError):
        payloads.job_name("a b")


# -- confined deletes -------------------------------------------------------------------
def test_safe_rmtree_stays_inside_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "c" / "node-0").mkdir(parents=True)
    (root / "c" / "node-0" / "f").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    (root / "link").symlink_to(outside)
    for bad in (root, root / ".", root / "..", root / "c" / ".." / "..", Path("/"),
                outside, root / "link" / "keep", tmp_path):
        with pytest.raises(fsutil.UnsafePathError):
            fsutil.safe_rmtree(bad, root)
    assert (outside / "keep").exists() and root.exists()
    # A symlink inside the root is removed as a link; its target is left alone.
    assert fsutil.safe_rmtree(root / "link", root)
    assert not (root / "link").exists() and (outside / "keep").exists()
    assert fsutil.safe_rmtree(root / "c", root)
    assert not (root / "c").exists()
    assert fsutil.safe_rmtree(root / "gone", root) is False
    assert fsutil.safe_rmtree(root / ("y" * 300), root) is False  # too long: nothing there


def test_ssh_terminate_script_refuses_outside_nodes_dir(tmp_path: Path) -> None:
    """The remote TERMINATE script (run here with python3, as on a pool host) deletes a node
    dir only inside <base>/nodes."""
    from skyd.transports import agent_scripts as remote

    base = tmp_path / ".skyd"
    (base / "nodes" / "c-0").mkdir(parents=True)
    (base / "nodes" / "c-0" / "f").write_text("x")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("keep")
    for nd in (str(victim), str(base / "nodes"), str(base / "nodes" / ".."), "/"):
        r = subprocess.run([sys.executable, "-c", remote.TERMINATE, nd, str(base), "sha"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 4, (nd, r.stdout, r.stderr)
        assert "refusing" in r.stderr
    assert (victim / "keep").exists() and (base / "nodes").is_dir()
    r = subprocess.run([sys.executable, "-c", remote.TERMINATE, str(base / "nodes" / "c-0"),
                        str(base), "sha"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "removed" in r.stdout, r.stderr
    assert not (base / "nodes" / "c-0").exists()


def test_local_sandbox_dir_is_a_plain_child(tmp_path: Path) -> None:
    from skyd.clouds.local import LocalProvisioner

    prov = LocalProvisioner(tmp_path / "local")
    assert prov.cluster_dir("ok") == tmp_path / "local" / "ok"
    for bad in ("..", ".", "a/b", "/", "", "x" * 300):
        with pytest.raises(fsutil.UnsafePathError):
            prov.cluster_dir(bad)


# -- file-mount destinations ------------------------------------------------------------
def test_file_mount_dotdot_rejected_at_validation(tmp_path: Path) -> None:
    write(tmp_path / "src.txt", "x\n")
    for dst in ("/../../tmp/x", "../../tmp/x", "~/../../x", "/data/../../etc/x"):
        y = write(tmp_path / "t.yaml", f"file_mounts:\n  {dst}: src.txt\nrun: echo\n")
        r = cli("validate", str(y))
        assert r.returncode == 2, (dst, r.stdout, r.stderr)
        assert "'..'" in r.stderr and "file_mounts" in r.stderr
        assert "Traceback" not in r.stderr


def test_sync_layer_confines_destinations(tmp_path: Path) -> None:
    """Even past validation (a stored task, an SDK caller), the `local` sync layer maps a
    destination inside the node's sandbox, never out of it (also not through a symlink)."""
    from skyd.clouds.base import ClusterHandle, NodeHandle
    from skyd.clouds.local import LocalProvisioner

    nd = tmp_path / "local" / "c" / "node-0"
    for sub in ("home", "root", "workdir"):
        (nd / sub).mkdir(parents=True)
    handle = ClusterHandle("c", "local", None, None, None, False, {}, 1, 0.0,
                           [NodeHandle(0, "c-0", "127.0.0.1", node_dir=str(nd))], "t")
    prov = LocalProvisioner(tmp_path / "local")
    assert prov.remote_path(handle, 0, "/data/x") == (nd / "root" / "data" / "x").resolve()
    assert prov.remote_path(handle, 0, "~/x") == (nd / "home" / "x").resolve()
    (nd / "home" / "esc").symlink_to(tmp_path)
    for dst in ("/../../tmp/x", "../../tmp/x", "~/../../x", "~/esc/x"):
        with pytest.raises(fsutil.UnsafePathError):
            prov.remote_path(handle, 0, dst)


# -- end to end: a real daemon ----------------------------------------------------------
@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with module_env(tmp_path_factory) as e:
        yield e


def api(method: str, path: str, body: Any = None, raw: bytes | None = None) -> tuple[int, Any]:
    from skyd.sdk.transport import UnixHTTPConnection

    conn = UnixHTTPConnection(os.environ["SKYD_SOCKET"], timeout=60)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read()
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text
    finally:
        conn.close()


def _home_intact(env: Env) -> None:
    """SKYD_HOME, its database and logs are still there, and the daemon still answers."""
    assert (env.home / "state.db").exists() and (env.home / "logs").is_dir()
    status, body = api("GET", "/v1/health")
    assert status == 200 and body["status"] == "ok"


def test_cli_refuses_bad_cluster_names(env: Env, tmp_path: Path) -> None:
    before = {p.name for p in env.home.iterdir()}
    for n in ["..", ".", "/", "../../x", "/abs/path", "a b", "$(touch PWNED)", "`id`", "a;b",
              "a\nb", "ñame", "x" * 300, "-lead"]:
        r = cli("launch", "-y", f"--cluster={n}", "echo hi")
        assert r.returncode == 2, (n, r.stdout, r.stderr)
        assert "letter first" in r.stderr and "Traceback" not in r.stderr
    _home_intact(env)
    assert {p.name for p in env.home.iterdir()} <= before | {"local", "logs"}
    assert not Path("PWNED").exists()
    assert env.json("status") == []


def test_api_refuses_bad_names_with_400(env: Env) -> None:
    for n in ("..", "/", "a b", "x" * 300, 7):
        status, body = api("POST", "/v1/requests/launch",
                           {"command": "echo hi", "cluster_name": n, "base_dir": "/tmp"})
        assert status == 400, (n, status, body)
        assert body["error"]["field"] == "cluster_name" and body["error"]["exit_code"] == 2
    status, body = api("POST", "/v1/requests/jobs.launch",
                       {"command": "echo hi", "name": "../x", "base_dir": "/tmp"})
    assert status == 400 and body["error"]["field"] == "name", body
    # The YAML's name names the managed job when -n is not given.
    status, body = api("POST", "/v1/requests/jobs.launch",
                       {"yaml": "name: -bad\nrun: echo hi\n", "base_dir": "/tmp"})
    assert status == 400, body
    rows = api("GET", "/v1/requests?limit=1000")[1]
    assert not [r for r in rows if r["verb"] in ("launch", "jobs.launch")], rows


def test_jobs_cli_refuses_bad_name(env: Env) -> None:
    r = cli("jobs", "launch", "-y", "-d", "-n", "a b", "echo hi")
    assert r.returncode == 2, r.stderr
    assert "letter first" in r.stderr


def _insert_row(db: Path, name: str, handle: dict[str, Any] | None = None) -> None:
    now = time.time()
    con = sqlite3.connect(db, timeout=30)
    try:
        with con:
            con.execute(
                "INSERT INTO clusters (name, status, num_nodes, resources, request_id, launched_at,"
                " status_updated_at, last_use, handle, cloud) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (name, "INIT", 1, "{}", "old", now, now, now,
                 json.dumps(handle) if handle else None, "local" if handle else None))
    finally:
        con.close()


def test_old_rows_with_bad_names_are_removable(env: Env) -> None:
    """Rows written before names were checked: `down` removes each (and only its own
    files); one of them never makes `down -a` fail for the others."""
    env.ok("launch", "-y", "-c", "good-one", "echo hi")
    assert env.cluster_dir("good-one").is_dir()
    db = env.home / "state.db"
    # A launch that died with an over-long name, and names that resolve to the home or root.
    for n in ("x" * 300, "..", ".", "/", "a b"):
        _insert_row(db, n)
    # A row whose stored node dir points outside the sandboxes (`-c ../escape` of old).
    outside = env.home / "escape" / "node-0"
    outside.mkdir(parents=True)
    (outside / "keep").write_text("keep")
    _insert_row(db, "../escape", {
        "cluster_name": "../escape", "cloud": "local", "region": None, "zone": None,
        "instance_type": "local", "use_spot": False, "accelerators": {}, "num_nodes": 1,
        "hourly_cost": 0.0, "token": "t", "nodes": [{
            "rank": 0, "instance_id": "x-0", "internal_ip": "127.0.0.1",
            "node_dir": str(env.home / "local" / ".." / "escape" / "node-0")}]})
    r = cli("down", "-y", "..")
    assert r.returncode == 0, r.stderr
    _home_intact(env)
    assert env.cluster_dir("good-one").is_dir()
    r = cli("down", "-a", "-y", timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert env.json("status") == []
    _home_intact(env)
    assert (outside / "keep").exists()  # outside the sandboxes: never deleted
    assert not env.cluster_dir("good-one").exists()
    assert (env.home / "local").is_dir()


def test_old_rows_with_odd_names_can_be_queried(env: Env) -> None:
    """Cluster names from before the name rule (`a b`, `a/b`, `a?b#c`) reach their own
    row through queue and logs (CLI and SDK): every path segment is quoted."""
    db = env.home / "state.db"
    odd = ("a b", "a/b", "q?x#y", "p%2Fq")
    for n in odd:
        _insert_row(db, n)
    try:
        for n in odd:
            r = cli("queue", "-o", "json", n)
            assert r.returncode == 0, (n, r.stdout, r.stderr)
            assert [q["cluster"] for q in json.loads(r.stdout)] == [n]
            r = cli("logs", "--status", n)
            assert "not found" not in (r.stdout + r.stderr).lower(), (n, r.stdout, r.stderr)
        from skyd import sdk

        assert sdk.queue("a/b") == []
    finally:
        for n in odd:
            cli("down", "-y", n)
