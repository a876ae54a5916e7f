"""The one-shot CLI: help, fast start (import cost), errors and exit codes, output. The
tests that need a daemon share one (module_env), in this file's order."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from skyd.cli.main import build_parser
from skyd.cli.progress import render_events
from tests.support.daemon import cli
from tests.support.pipeline import Env

HEAVY = ("aiohttp", "pydantic", "yaml", "rich", "textual", "highspy", "asyncssh", "grpclib",
         "betterproto", "aiosqlite", "anyio", "boto3", "aiobotocore", "kubernetes_asyncio")


SHARED_DAEMON_ENV: dict[str, str] = {}  # `shared`: one daemon for the module (tests/support/plugin.py)


def _subcommand_paths() -> list[list[str]]:
    import argparse

    out: list[list[str]] = []

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        out.append(path)
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    walk(sp, [*path, name])

    walk(build_parser(), [])
    return out


def test_help_everywhere() -> None:
    paths = _subcommand_paths()
    assert ["status"] in paths and ["requests", "logs"] in paths and ["daemon", "run"] in paths
    for path in paths:
        buf = io.StringIO()
        with pytest.raises(SystemExit) as e:
            old, sys.stdout = sys.stdout, buf
            try:
                build_parser().parse_args([*path, "--help"])
            finally:
                sys.stdout = old
        assert e.value.code == 0
        assert "usage: skyd" in buf.getvalue()
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("skyd ")


_IMPORT_PROBE = r"""
import sys
from skyd.cli.main import main
argv = sys.argv[1:]
try:
    rc = main(argv)
except SystemExit as e:
    rc = e.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY})
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
sys.exit(rc)
"""


@pytest.mark.parametrize("argv", [["--help"], ["status", "-o", "json"]])
def test_fast_path_imports_nothing_heavy(shared: Env, argv: list[str]) -> None:
    probe = _IMPORT_PROBE.replace("{HEAVY}", repr(set(HEAVY)))
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", probe, *argv],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    heavy_line = [x for x in r.stderr.splitlines() if x.startswith("HEAVY=")][-1]
    assert heavy_line == "HEAVY=", heavy_line
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines()
                if line.startswith("import time:")}
    assert "http.client" in imported or argv == ["--help"]
    assert not {m for m in imported if m.split(".")[0] in HEAVY}
    assert "dataclasses" not in imported  # ~15 ms of every call (it imports inspect)
    if argv != ["--help"]:
        assert json.loads(r.stdout) == []


def test_all_command_modules_import_cheaply() -> None:
    from skyd.cli.commands import COMMAND_MODULES

    code = ("import sys, importlib\n"
            f"for m in {COMMAND_MODULES!r}: importlib.import_module(m)\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {set(HEAVY)!r}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_status_json_and_table_empty(shared: Env) -> None:
    r = cli("status", "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout) == []
    r = cli("status")
    assert r.returncode == 0 and "No existing clusters." in r.stdout


def test_status_table_shows_clusters(shared: Env) -> None:
    import sqlite3
    import time

    with sqlite3.connect(shared.home / "state.db") as con:
        con.execute(
            "INSERT INTO clusters(name, status, cloud, region, instance_type, accelerators, "
            "num_nodes, use_spot, launched_at, autostop_minutes, autostop_down) "
            "VALUES('c1', 'UP', 'aws', 'us-east-1', 'p5.48xlarge', '{\"H100\": 8}', 2, 1, ?, 10, 1)",
            (time.time() - 120,))
    try:
        rows = json.loads(cli("status", "-o", "json").stdout)
        assert rows[0]["name"] == "c1" and rows[0]["accelerators"] == {"H100": 8}
        assert rows[0]["use_spot"] is True
        out = cli("status").stdout
        for want in ("NAME", "INFRA", "RESOURCES", "AUTOSTOP", "LAUNCHED", "aws/us-east-1",
                     "2x(H100:8, p5.48xlarge) [spot]", "10 min (down)", "2m ago"):
            assert want in out, (want, out)
    finally:  # a row with no nodes behind it: gone again for the tests after this one
        with sqlite3.connect(shared.home / "state.db") as con:
            con.execute("DELETE FROM clusters WHERE name = 'c1'")


def test_errors_one_line_plus_hint_and_exit_codes(shared: Env, tmp_path: Path) -> None:
    r = cli("requests", "get", "deadbeef")
    assert r.returncode == 3
    assert r.stderr.startswith("error: no request 'deadbeef'\nhint: ")
    assert "Traceback" not in r.stderr
    r = cli("validate", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and r.stderr.startswith("error: cannot read") and "Traceback" not in r.stderr
    no_daemon = {"SKYD_NO_AUTOSTART": "1", "SKYD_SOCKET": str(tmp_path / "none.sock")}
    r = cli("status", env=no_daemon)
    assert r.returncode == 7 and r.stderr.startswith("error: cannot reach the skyd daemon")
    assert "hint: start it with: skyd daemon start" in r.stderr
    r = cli("status", "-o", "yaml")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = cli("validate", "x.yaml", "--env", "NOT_SET_ANYWHERE_42")
    assert r.returncode == 2 and "not set in your environment" in r.stderr


def test_requests_commands(shared: Env) -> None:
    from skyd.sdk.transport import Client

    with Client(autostart=False) as c:
        done = c.submit("sleep", {"seconds": 0.2, "log_every": 0.1})
        long = c.submit("sleep", {"seconds": 60})
    r = cli("requests", "logs", done[:6], "--follow")
    assert r.returncode == 0 and "slept 0.2s of 0.2s" in r.stdout
    rows = json.loads(cli("requests", "ls", "-o", "json").stdout)
    assert {x["id"] for x in rows} >= {done, long}
    assert json.loads(cli("requests", "-o", "json").stdout) == rows
    got = json.loads(cli("requests", "get", done, "-o", "json").stdout)
    assert got["status"] == "SUCCEEDED" and got["payload"]["seconds"] == 0.2
    r = cli("requests", "cancel", long)
    assert r.returncode == 0 and "CANCELLED" in r.stdout
    r = cli("requests", "logs", long)
    assert r.returncode == 130 and "error: request cancelled" in r.stderr
    table = cli("requests").stdout
    assert done in table and "CANCELLED" in table


def test_progress_renders_stages_and_logs() -> None:
    events = [
        {"type": "status", "status": "RUNNING"},
        {"type": "stage", "name": "provision", "state": "start"},
        {"type": "log", "text": "creating instance\n"},
        {"type": "stage", "name": "provision", "state": "done", "elapsed": 1.42},
        {"type": "stage", "name": "setup", "state": "failed", "elapsed": 0.5, "reason": "exit 1"},
        {"type": "job_log", "text": "hello from the job\n"},
        {"type": "result", "result": {"cluster_name": "c1"}},
    ]
    out, err = io.StringIO(), io.StringIO()
    finished, result = render_events(iter(events), out=out, err=err, tty=False)
    assert finished and result == {"cluster_name": "c1"}
    assert out.getvalue() == "creating instance\nhello from the job\n"
    # Off a TTY: only end lines, no spinner text (no "Provisioning…").
    assert err.getvalue().splitlines() == [
        "✓ Provisioned (1.4s)", "✗ Running setup failed (0.5s): exit 1"]


def test_completion_scripts() -> None:
    r = cli("completion", "bash")
    assert r.returncode == 0 and "complete -o filenames -F _skyd skyd" in r.stdout
    assert subprocess.run(["bash", "-n"], input=r.stdout, text=True).returncode == 0
    for shell in ("zsh", "fish"):
        out = cli("completion", shell).stdout
        assert "requests" in out and "status" in out
        if shutil.which(shell):
            assert subprocess.run([shell, "-n"], input=out, text=True).returncode == 0
    # bash: the script really completes subcommands
    script = cli("completion", "bash").stdout + (
        '\nCOMP_WORDS=(skyd requests c); COMP_CWORD=2; _skyd; echo "${COMPREPLY[@]}"\n')
    got = subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout.split()
    assert got == ["cancel"]


def test_validate_local(tmp_path: Path) -> None:
    y = tmp_path / "t.yaml"
    y.write_text("name: t\nresources:\n  accelerators: h100:8\nenvs:\n  A: null\nrun: echo $A\n")
    r = cli("validate", "-o", "json", str(y), "--env", "A=1")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["name"] == "t" and doc["resources"][0]["accelerators"] == {"H100": 8}
    r = cli("validate", str(y))
    assert r.returncode == 0 and "env A has no value" in r.stderr
    y.write_text("name: t\nnum_nodes: -1\nrun: x\n")
    r = cli("validate", str(y))
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr
