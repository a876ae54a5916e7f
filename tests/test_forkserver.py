"""The tests' fork servers (tests/support/forkserver.py): a forked CLI call or daemon is
what a fresh process would be, to the test that started it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support import forkserver
from tests.support.daemon import (
    REPO,
    SKYD_BIN,
    DaemonProc,
    answers,
    running_daemon,
    sock_path,
    wait_for,
)

TASK = "name: t\nenvs:\n  GREETING: none\nrun: echo $GREETING\n"


def _fresh(args: list[str], env: dict[str, str], cwd: Path, input: str | None = None,
           ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run([str(SKYD_BIN), *args], capture_output=True, text=True, env=env,
                          cwd=cwd, input=input, timeout=60, check=False,
                          stdin=subprocess.DEVNULL if input is None else None)


@pytest.mark.parametrize("args, input", [
    (["--version"], None),
    (["no-such-verb"], None),  # argparse's usage on stderr, exit code 2
    (["validate", "task.yaml", "-o", "json"], None),  # a path relative to the call's cwd
    (["validate", "-", "--env", "GREETING", "-o", "json"], TASK),  # stdin, the call's env
    (["validate", "missing.yaml"], None),  # a user's mistake: error and hint, non-zero
])
def test_a_forked_cli_call_answers_as_a_fresh_process(skyd_home: Path, tmp_path: Path,
                                                      args: list[str], input: str | None) -> None:  # fmt: skip
    (tmp_path / "task.yaml").write_text(TASK)
    env = {**os.environ, "GREETING": "from-the-callers-env"}
    forked = forkserver.run([str(SKYD_BIN), *args], env, timeout=60, input=input, cwd=tmp_path)
    fresh = _fresh(args, env, tmp_path, input)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode, fresh.stdout, fresh.stderr)
    if input is not None:
        assert "from-the-callers-env" in forked.stdout


def test_a_call_whose_start_settings_differ_runs_fresh(skyd_home: Path) -> None:
    """PYTHONPATH, the locale and the like are read when Python starts: such a call cannot
    share the server's interpreter, so it is a fresh process (and still answers)."""
    env = {**os.environ, "PYTHONPATH": f"{os.environ['PYTHONPATH']}{os.pathsep}{REPO}/nowhere"}
    assert forkserver.spawn_daemon(env, str(REPO), subprocess.PIPE) is None
    r = forkserver.run([str(SKYD_BIN), "--version"], env, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("skyd ")


def test_a_forked_daemon_ends_as_a_process_would(skyd_home: Path) -> None:
    d = DaemonProc().start()
    try:
        assert isinstance(d.proc, forkserver.Forked)  # the suite's daemons are forked
        assert d.proc.poll() is None
        environ = Path(f"/proc/{d.pid}/status").read_text()
        assert f"PPid:\t{os.getpid()}" not in environ  # its parent is the server
        assert d.terminate() == 0  # SIGTERM: a clean stop, exit code 0
        assert not answers(sock_path())
    finally:
        d.cleanup()
    d = DaemonProc().start()
    try:
        d.kill9()
        assert d.proc is not None and d.proc.returncode == -signal.SIGKILL
        wait_for(lambda: not Path(f"/proc/{d.pid}").exists(), timeout=10)  # reaped
    finally:
        d.cleanup()


def test_a_forked_call_past_its_timeout_is_killed(skyd_home: Path, tmp_path: Path) -> None:
    """A daemon socket that takes the request and never answers keeps `skyd status` waiting;
    the call's timeout kills it, as subprocess.run's does."""
    path = str(tmp_path / "silent.sock")
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(path)
    silent.listen(8)
    try:
        env = {**os.environ, "SKYD_SOCKET": path}
        with pytest.raises(subprocess.TimeoutExpired):
            forkserver.run([str(SKYD_BIN), "status"], env, timeout=2)
    finally:
        silent.close()


def test_the_servers_carry_no_tests_home(skyd_home: Path) -> None:
    """A server outlives the test that started it: its /proc environ names no SKYD_HOME or
    HOME, or leak checks that look for a test's home there (the kill -9 harness's) would
    count it as that test's leftover."""
    assert forkserver.run([str(SKYD_BIN), "--version"], dict(os.environ), timeout=60).returncode == 0
    with running_daemon():
        pass
    pids = forkserver.server_pids()
    assert len(pids) == 2
    for pid in pids:
        names = {v.split(b"=", 1)[0] for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")}
        assert not names & {b"SKYD_HOME", b"HOME", b"SKYD_SOCKET"}, names
