"""What skyd owns is private; what it does not own, it does not touch.

The second-user checks run a real read as another Unix user (``useradd`` + ``setpriv``):
they need root to create that user, and skip with that reason otherwise."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyd.daemon.app import bind_socket
from skyd.errors import DaemonUnavailableError
from tests.fakes.unixnames import per_worker
from tests.support.daemon import cli, running_daemon, stop_autostarted, wait_for

PROBE_USER = per_worker("skydprobe")


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


# -- the socket's directory -------------------------------------------------------------
def test_socket_in_a_users_own_dir_leaves_the_dir_alone(tmp_path: Path) -> None:
    """SKYD_SOCKET=~/project/s.sock: the project directory keeps its mode."""
    project = tmp_path / "project"
    project.mkdir()
    os.chmod(project, 0o755)
    sock = bind_socket(project / "s.sock")
    try:
        assert mode(project) == 0o755
        assert mode(project / "s.sock") == 0o600
    finally:
        sock.close()


def test_socket_in_the_root_dir_leaves_it_alone(tmp_path: Path) -> None:
    """SKYD_SOCKET=/skyd.sock as root made / 0700. A root-owned 0755 directory stands in
    for / (binding in the real / would touch the machine)."""
    top = tmp_path / "rootlike"
    top.mkdir()
    os.chmod(top, 0o755)
    sock = bind_socket(top / "skyd.sock")
    sock.close()
    assert mode(top) == 0o755


def test_socket_dirs_skyd_creates_are_private(tmp_path: Path) -> None:
    top = tmp_path / "a"
    sock = bind_socket(top / "b" / "c" / "s.sock")
    sock.close()
    for d in (top, top / "b", top / "b" / "c"):
        assert mode(d) == 0o700, d


def test_socket_in_a_dir_others_can_write_is_refused(tmp_path: Path) -> None:
    """World-writable and not sticky: someone else could replace the socket. Refused with a
    message naming the directory, and the directory is not changed."""
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(DaemonUnavailableError, match="writable by other users") as ei:
        bind_socket(d / "s.sock")
    assert str(d) in str(ei.value) and ei.value.hint and "SKYD_SOCKET" in ei.value.hint
    assert mode(d) == 0o777
    assert not (d / "s.sock").exists()


def test_daemon_refuses_an_unsafe_socket_dir_with_a_message(tmp_path: Path,
                                                          skyd_home: Path) -> None:
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    r = cli("daemon", "start", env={"SKYD_SOCKET": str(d / "s.sock")})
    try:
        assert r.returncode != 0
        assert "writable by other users" in r.stderr + r.stdout
        assert mode(d) == 0o777
    finally:
        stop_autostarted()


# -- SKYD_HOME, as a second user sees it ------------------------------------------------
@pytest.fixture(scope="module")
def probe_user() -> str:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second Unix user (useradd)")
    if shutil.which("useradd") is None or shutil.which("setpriv") is None:
        pytest.skip("needs useradd and setpriv (util-linux)")
    r = subprocess.run(["id", "-u", PROBE_USER], capture_output=True)
    if r.returncode != 0:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", PROBE_USER], check=True,
                       capture_output=True)
    return PROBE_USER


def as_user(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    uid = int(subprocess.run(["id", "-u", user], capture_output=True, text=True,
                             check=True).stdout)
    gid = int(subprocess.run(["id", "-g", user], capture_output=True, text=True,
                             check=True).stdout)
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                           "--", *argv], capture_output=True, text=True, timeout=30)


@pytest.fixture
def open_base(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A world-traversable base (0755, as a user's home often is) holding SKYD_HOME, so that
    only skyd's own modes stand between a second user and its files."""
    base = Path(tempfile.mkdtemp(prefix="skyd-priv-", dir="/tmp"))
    os.chmod(base, 0o755)
    monkeypatch.setenv("SKYD_SOCKET", str(base / "sock" / "s.sock"))
    monkeypatch.setenv("SKYD_CONFIG_DIR", str(base / "config"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def readable_by(user: str, path: Path) -> bool:
    if path.is_dir():
        return as_user(user, "ls", str(path)).returncode == 0
    return as_user(user, "cat", str(path)).returncode == 0


def test_a_new_home_is_private_to_a_second_user(probe_user: str, open_base: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    home = open_base / "skyd"  # does not exist yet: the CLI's auto-start creates it
    monkeypatch.setenv("SKYD_HOME", str(home))
    r = cli("requests", "ls", "-o", "json")
    try:
        assert r.returncode == 0, r.stderr
        wait_for(lambda: (home / "state.db").exists())
        assert mode(home) == 0o700
        for f in ("state.db", "logs/daemon.log", "logs/daemon.stderr"):
            assert mode(home / f) & 0o077 == 0, (f, oct(mode(home / f)))
        for d in ("logs", "run"):
            assert mode(home / d) == 0o700, d
        # A second user, with the home made traversable, still reads nothing.
        os.chmod(home, 0o711)
        for f in ("state.db", "logs/daemon.log"):
            assert not readable_by(probe_user, home / f), f
        os.chmod(home, 0o700)
        assert not readable_by(probe_user, home)
    finally:
        stop_autostarted()


def test_an_existing_install_is_tightened_at_start(probe_user: str, open_base: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """An install made by an older version (0755 dirs, 0644 files, a local node's
    agent.json/agent.log/jobs.db world-readable) is private after the next daemon start;
    what a job keeps in its sandbox keeps its modes (an executable stays executable)."""
    home = open_base / "skyd"
    node = home / "local" / "c1" / "node-0"
    for d in (home / "logs" / "requests", node / "workdir", home / "run"):
        d.mkdir(parents=True)
    files = [home / "logs" / "daemon.log", home / "logs" / "requests" / "abcd1234.log",
             node / "agent.json", node / "agent.log", node / "jobs.db"]
    for f in files:
        f.write_text("secret-ish\n")
    script = node / "workdir" / "run.sh"
    script.write_text("#!/bin/sh\n")
    for p in [home, home / "logs", home / "local", home / "local" / "c1", node, *files]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.chmod(script, 0o755)
    assert readable_by(probe_user, node / "agent.json")  # the probe can read before
    monkeypatch.setenv("SKYD_HOME", str(home))
    with running_daemon():
        assert mode(home) == 0o700
        for d in (home / "logs", home / "local", home / "local" / "c1", node):
            assert mode(d) == 0o700, d
        for f in [*files, home / "state.db"]:
            assert mode(f) & 0o077 == 0, (f, oct(mode(f)))
        assert mode(script) == 0o755  # the job's own file: untouched
        os.chmod(home, 0o711)  # even with every directory made traversable again
        for d in (home / "local", home / "local" / "c1", node):
            os.chmod(d, 0o711)
        for f in [*files, home / "state.db"]:
            assert not readable_by(probe_user, f), f
        os.chmod(home, 0o700)


def test_a_local_nodes_files_are_private_and_jobs_keep_the_users_umask(
        probe_user: str, open_base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local node's agent.json, agent.log, jobs.db and job logs are private to the user
    (a second user reads none of them), while a file the job writes gets the user's umask."""
    home = open_base / "skyd"
    monkeypatch.setenv("SKYD_HOME", str(home))
    task = open_base / "t.yaml"
    task.write_text("resources:\n  infra: local\nrun: echo hi > ~/out.txt\n")
    old = os.umask(0o022)
    try:
        r = cli("launch", "-y", "-c", "priv", str(task), timeout=120)
    finally:
        os.umask(old)
    try:
        assert r.returncode == 0, r.stderr
        node = home / "local" / "priv" / "node-0"
        assert mode(node) == 0o700
        files = [node / "agent.json", node / "agent.log", node / "jobs.db"]
        files += sorted((node / "jobs").rglob("*.log"))
        for f in files:
            assert mode(f) & 0o077 == 0, (f, oct(mode(f)))
        assert mode(node / "home" / "out.txt") == 0o644  # the job's file: the user's umask
        for d in (home, home / "local", home / "local" / "priv", node, node / "jobs"):
            os.chmod(d, 0o711)
        for f in files:
            assert not readable_by(probe_user, f), f
    finally:
        cli("down", "-y", "priv", timeout=120)
        stop_autostarted()
