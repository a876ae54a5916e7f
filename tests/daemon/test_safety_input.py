"""Bounded input; the daemon never wedges: alias bombs, huge or deep documents, non-UTF-8
bytes, absurd numbers, bad ids -- refused where they enter (exit 2 / HTTP 400 naming the
field), never Infinity/NaN in JSON, never a failed request resumed after a restart."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.test_safety_names import api
from tests.support.daemon import DaemonProc
from tests.support.pipeline import Env, cli, module_env, wait_for, write


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The classic "billion laughs": ~400 bytes that expand to width**levels nodes."""
    lines = ["a0: &a0 [" + ",".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    return "config:\n" + "".join(f"  {ln}\n" for ln in lines) + "run: echo hi\n"


def deep_yaml(depth: int = 20000) -> str:
    return "run: echo hi\nconfig: " + "[" * depth + "]" * depth + "\n"


# -- the loader, in process -------------------------------------------------------------
def test_loader_refuses_alias_bomb_fast() -> None:
    from skyd.errors import InvalidSpecError
    from skyd.models import load_dag

    text = alias_bomb()
    assert len(text) < 500
    t0 = time.monotonic()
    with pytest.raises(InvalidSpecError) as ei:
        load_dag("bomb.yaml", text=text)
    assert time.monotonic() - t0 < 5
    assert "alias" in str(ei.value) and ei.value.exit_code == 2
    # Ordinary anchors still work, and fields under an alias still get a line.
    ok = "resources: &r\n  cpus: 2\nrun: echo\nconfig:\n  copy: *r\n"
    assert load_dag("ok.yaml", text=ok).tasks[0].resources[0].cpus == "2"


def test_loader_refuses_deep_big_and_huge_numbers() -> None:
    from skyd.errors import InvalidSpecError
    from skyd.models import load_dag

    with pytest.raises(InvalidSpecError) as ei:
        load_dag("deep.yaml", text=deep_yaml())
    assert "nest" in str(ei.value)
    with pytest.raises(InvalidSpecError) as ei:
        load_dag("big.yaml", text="run: echo\nconfig:\n  x: '" + "a" * (2 << 20) + "'\n")
    assert "at most" in str(ei.value)
    with pytest.raises(InvalidSpecError) as ei:
        load_dag("s.yaml", text="run: echo \udcff\n")  # a lone surrogate (SDK text input)
    assert "Unicode" in str(ei.value)
    for n in (10**32, 1_000_000_000_000):
        with pytest.raises(InvalidSpecError) as ei:
            load_dag("n.yaml", text=f"num_nodes: {n}\nrun: echo\n")
        assert ei.value.field == "num_nodes"


@pytest.mark.parametrize("yaml_text", [
    "resources:\n  autostop: 1e999\nrun: x\n",
    "resources:\n  autostop: .nan\nrun: x\n",
    "resources:\n  autostop:\n    idle_minutes: 100000000000000000000000\nrun: x\n",
    "resources:\n  disk_size: 1e999\nrun: x\n",
    "resources:\n  accelerators: A100:1e300\nrun: x\n",
    "resources:\n  max_hourly_cost: .inf\nrun: x\n",
    "estimated_runtime: .inf\nrun: x\n",
    "inputs:\n  s3://x: .nan\nrun: x\n",
])
def test_model_numbers_are_range_checked(yaml_text: str) -> None:
    """inf / NaN / absurd magnitudes: one InvalidSpecError naming the field (no
    OverflowError, nothing non-finite stored)."""
    from skyd.errors import InvalidSpecError
    from skyd.models import load_dag

    with pytest.raises(InvalidSpecError) as ei:
        load_dag("n.yaml", text=yaml_text)
    assert ei.value.field and ei.value.exit_code == 2


# -- the CLI ----------------------------------------------------------------------------
def test_validate_refuses_bomb_deep_and_bad_bytes(tmp_path: Path) -> None:
    cases = {
        "bomb.yaml": (alias_bomb().encode(), "alias"),
        "deep.yaml": (deep_yaml().encode(), "nest"),
        "bytes.yaml": (b"run: echo \xff\xfe\n", "UTF-8"),
        "nodes.yaml": (b"num_nodes: 100000000000000000000000000000000\nrun: echo\n", "num_nodes"),
    }
    for fname, (data, needle) in cases.items():
        p = tmp_path / fname
        p.write_bytes(data)
        r = cli("validate", str(p), timeout=60)
        assert r.returncode == 2, (fname, r.stdout, r.stderr)
        assert needle in r.stderr and "Traceback" not in r.stderr, (fname, r.stderr)


# -- a real daemon ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with module_env(tmp_path_factory) as e:
        yield e


def _healthy() -> bool:
    status, body = api("GET", "/v1/health")
    return status == 200 and body["status"] == "ok"


def _requests(verb: str) -> list[dict[str, object]]:
    return [r for r in api("GET", "/v1/requests?limit=1000")[1] if r["verb"] == verb]


def test_daemon_refuses_bomb_without_a_request(env: Env, tmp_path: Path) -> None:
    y = write(tmp_path / "bomb.yaml", alias_bomb())
    r = cli("launch", "-y", "-c", "bomb", str(y), timeout=60)
    assert r.returncode == 2, r.stderr
    assert "alias" in r.stderr
    status, body = api("POST", "/v1/validate", {"yaml": alias_bomb()})
    assert status == 400 and "alias" in body["error"]["message"], body
    status, body = api("POST", "/v1/requests/jobs.launch", {"yaml": alias_bomb(), "base_dir": "/tmp"})
    assert status == 400, body
    assert _healthy()
    assert not _requests("launch") and not _requests("jobs.launch")
    assert env.status("bomb") is None


def test_num_nodes_checked_against_the_infra(env: Env, tmp_path: Path) -> None:
    from skyd.clouds.local import local_max_nodes

    y = write(tmp_path / "many.yaml", "num_nodes: 1000000000\nresources:\n  infra: local\nrun: echo\n")
    r = cli("launch", "--dryrun", str(y), timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "num_nodes" in r.stderr and "1000000000x" not in r.stdout + r.stderr
    y = write(tmp_path / "more.yaml", "num_nodes: 5000\nrun: echo\n")  # within the model's bound
    for args in (["--dryrun"], ["-y", "-c", "many"]):
        r = cli("launch", *args, str(y), timeout=60)
        assert r.returncode == 2, r.stderr
        assert f"at most {local_max_nodes()}" in r.stderr and "5000x" not in r.stdout
    assert env.status("many") is None and not env.cluster_dir("many").exists()
    r = cli("launch", "-y", "-c", "many", "--num-nodes", str(local_max_nodes() + 1), "echo", timeout=60)
    assert r.returncode == 2, r.stderr
    assert not env.cluster_dir("many").exists()
    # A managed job is refused at submit too (no job row, no controller).
    r = cli("jobs", "launch", "-y", "-d", str(y), timeout=60)
    assert r.returncode == 2, r.stderr
    assert "num_nodes" in r.stderr
    assert env.json("jobs", "queue") == []
    assert not _requests("jobs.launch")
    assert len(_requests("launch")) <= 1  # the 5000-node dry run (failed when planned)


def test_api_numbers_and_bodies_answer_400(env: Env) -> None:
    base = {"command": "echo hi", "base_dir": "/tmp", "cluster_name": "nums"}
    for raw in (b'{"command":"echo","idle_minutes":1e999}', b'{"command":"echo","idle_minutes":NaN}',
                b'{"command":"echo","idle_minutes":Infinity}', b'{"command":"echo","idle_minutes":-5}',
                b'{"command":"echo","idle_minutes":"x"}'):
        status, body = api("POST", "/v1/requests/launch", raw=raw)
        assert status == 400, (raw, status, body)
        assert body["error"]["field"] in ("idle_minutes", "body"), body
    status, body = api("POST", "/v1/requests/autostop", {"clusters": ["x"], "idle_minutes": 1e300})
    assert status == 400 and body["error"]["field"] == "idle_minutes", body
    status, body = api("POST", "/v1/requests/cancel", {"cluster_name": "x", "job_ids": ["a"]})
    assert status == 400 and body["error"]["field"] == "job_ids", body
    status, body = api("POST", "/v1/requests/jobs.launch", {**base, "priority": 1e999})
    assert status == 400, body
    status, body = api("POST", "/v1/requests/jobs.cancel", {"ids": ["x", 10**30]})
    assert status == 400 and body["error"]["field"] == "ids", body
    for raw in (b'{"command":"echo \xff\xfe"}', b'{"command":"echo \\udcff"}'):
        status, body = api("POST", "/v1/requests/launch", raw=raw)
        assert status == 400 and body["error"]["field"] == "body", (raw, status, body)
    status, body = api("GET", "/v1/requests?limit=99999999999999999999999")
    assert status == 400 and body["error"]["field"] == "limit", body
    deep = b'{"command":"echo","x":' + b"[" * 100000 + b"]" * 100000 + b"}"
    for path in ("/v1/requests/launch", "/v1/validate", "/v1/status/refresh"):
        status, body = api("POST", path, raw=deep)
        assert status == 400 and body["error"]["field"] == "body", (path, status, body)
    assert _healthy()


def test_log_routes_answer_400_on_bad_ids(env: Env) -> None:
    env.ok("launch", "-y", "-c", "ids", "echo hi")
    for path in ("/v1/clusters/ids/jobs/abc/logs", "/v1/clusters/ids/logs?job_id=x",
                 "/v1/clusters/ids/logs?tail=x", "/v1/clusters/ids/logs?node=x",
                 "/v1/clusters/ids/jobs/99999999999999999999999/logs", "/v1/jobs/abc",
                 "/v1/jobs/abc/logs", "/v1/jobs/99999999999999999999999"):
        status, body = api("GET", path)
        assert status == 400, (path, status, body)
        assert body["error"]["field"], body


def test_no_infinity_in_json_output(env: Env) -> None:
    """A value that got in before the checks (an old row) never reaches JSON output."""
    env.ok("launch", "-y", "-c", "inf-row", "echo hi")
    con = sqlite3.connect(env.home / "state.db", timeout=30)
    with con:
        con.execute("UPDATE clusters SET autostop_minutes = ?, hourly_cost = ? WHERE name = ?",
                    (float("inf"), float("nan"), "inf-row"))
    con.close()
    from skyd.sdk.transport import UnixHTTPConnection

    for path in ("/v1/status", "/v1/cost-report"):
        conn = UnixHTTPConnection(os.environ["SKYD_SOCKET"], timeout=30)
        conn.request("GET", path)
        text = conn.getresponse().read().decode()
        conn.close()
        assert "Infinity" not in text and "NaN" not in text, (path, text)
        json.loads(text, parse_constant=pytest.fail)
    rows = env.json("status")
    assert any(r["name"] == "inf-row" for r in rows)


def test_failed_checks_never_resume(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """A launch left RUNNING by an older daemon whose payload fails today's checks (here the
    alias bomb that wedged it) is failed at restart, not resumed."""
    with module_env(tmp_path_factory) as e:
        assert e.daemon is not None
        e.daemon.terminate()
        e.daemon.cleanup()
        con = sqlite3.connect(e.home / "state.db", timeout=30)
        with con:
            con.execute(
                "INSERT INTO requests(id, verb, status, created_at, started_at, payload, stages,"
                " pid) VALUES(?,?,?,?,?,?,?,?)",
                ("deadbeef", "launch", "RUNNING", time.time(), time.time(),
                 json.dumps({"yaml": alias_bomb(), "cluster_name": "bombed", "base_dir": "/tmp"}),
                 "[]", 1))
        con.close()
        e.daemon = DaemonProc().start()

        def failed() -> dict[str, object] | None:
            status, row = api("GET", "/v1/requests/deadbeef")
            return row if status == 200 and row["status"] == "FAILED" else None

        row = wait_for(failed, timeout=30, interval=0.2)
        assert "alias" in row["error"]["message"], row  # type: ignore[index]
        assert _healthy()
        assert e.status("bombed") is None and not e.cluster_dir("bombed").exists()
