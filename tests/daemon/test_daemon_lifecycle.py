"""Daemon lifecycle: permissions, foreign uids, SIGTERM, sd_notify, single instance."""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skyd.daemon.notify import sd_notify
from skyd.daemon.server import peer_allowed, peer_credentials
from skyd.sdk.transport import Client
from tests.fakes.unixnames import per_worker
from tests.support.daemon import REPO, SKYD_BIN, DaemonProc, cli, running_daemon, sock_path


def test_socket_and_dir_permissions(skyd_home: Path) -> None:
    with running_daemon():
        sp = Path(sock_path())
        assert stat.S_IMODE(sp.stat().st_mode) == 0o600
        assert stat.S_IMODE(sp.parent.stat().st_mode) == 0o700
        assert stat.S_ISSOCK(sp.stat().st_mode)
    assert not sp.exists()  # removed at clean shutdown


def test_peer_check_unit() -> None:
    a, b = socket.socketpair(socket.AF_UNIX)
    try:
        creds = peer_credentials(a)
        assert creds is not None and creds[0] == os.getpid() and creds[1] == os.getuid()
    finally:
        a.close()
        b.close()
    assert peer_allowed(os.getuid(), os.getuid())
    assert not peer_allowed(os.getuid() + 1, os.getuid())
    assert not peer_allowed(None, os.getuid())
    tcp = socket.socket(socket.AF_INET)
    try:
        assert peer_credentials(tcp) is None
    finally:
        tcp.close()


PROBE = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("CONNECT", type(e).__name__); sys.exit(0)
s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
data = b""
while True:
    c = s.recv(65536)
    if not c: break
    data += c
print(data.decode().split("\r\n")[0]); print(data.decode().split("\r\n\r\n", 1)[1])
"""


def _foreign_user() -> str | None:
    if os.getuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        return None
    name = per_worker("skydtest")
    if subprocess.run(["id", name], capture_output=True).returncode != 0:
        r = subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], capture_output=True)
        if r.returncode != 0:
            return None
    return name


def test_foreign_uid_is_rejected(skyd_home: Path) -> None:
    user = _foreign_user()
    if user is None:
        pytest.skip("needs root with useradd/runuser for a real second uid (unit test covers the check)")
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no system python3 the foreign user can run")
    with running_daemon():
        sp = sock_path()
        run = ["runuser", "-u", user, "--", "/usr/bin/env", "-i", "/usr/bin/python3", "-c", PROBE, sp]
        out = subprocess.run(run, capture_output=True, text=True, timeout=30)
        assert out.stdout.startswith("CONNECT PermissionError"), out  # the 0700 dir stops it
        # Loosen the filesystem permissions: the peer-uid check still refuses.
        os.chmod(Path(sp).parent, 0o755)
        os.chmod(sp, 0o666)
        out = subprocess.run(run, capture_output=True, text=True, timeout=30)
        assert "403" in out.stdout.splitlines()[0], out
        assert "another user" in out.stdout
        with Client(autostart=False) as c:  # our own uid still gets in
            assert c.get("/v1/health")["status"] == "ok"


def _notify_socket(tmp: Path, abstract: bool) -> tuple[socket.socket, str]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if abstract:
        name = f"skyd-test-{os.getpid()}-{time.monotonic_ns()}"
        s.bind("\0" + name)
        addr = "@" + name
    else:
        addr = str(tmp / "notify.sock")
        s.bind(addr)
    s.settimeout(20)
    return s, addr


def test_sd_notify_abstract_and_path(tmp_path: Path) -> None:
    for abstract in (False, True):
        s, addr = _notify_socket(tmp_path, abstract)
        try:
            assert sd_notify("READY=1", {"NOTIFY_SOCKET": addr})
            assert s.recv(4096) == b"READY=1"
        finally:
            s.close()
    assert not sd_notify("READY=1", {})


def test_sigterm_with_inflight_requests(skyd_home: Path, tmp_path: Path) -> None:
    ns, addr = _notify_socket(tmp_path, abstract=True)
    d = DaemonProc(NOTIFY_SOCKET=addr, SKYD_SHUTDOWN_GRACE="5")
    try:
        d.start()
        assert ns.recv(4096).startswith(b"READY=1")
        with Client(autostart=False) as c:
            ids = [c.submit("sleep", {"seconds": 120}) for _ in range(5)]
            for rid in ids:
                for ev in c.events(rid):
                    if ev["type"] == "log":
                        break
        t0 = time.monotonic()
        rc = d.terminate(timeout=15)
        took = time.monotonic() - t0
        assert rc == 0 and took < 6, (rc, took)
        assert ns.recv(4096) == b"STOPPING=1"
    finally:
        ns.close()
        d.cleanup()
    db = skyd_home / "state.db"
    assert not Path(str(db) + "-wal").exists(), "DB not closed cleanly"
    con = sqlite3.connect(db)
    rows = con.execute("SELECT status, error FROM requests").fetchall()
    con.close()
    assert len(rows) == 5 and all(r[0] == "CANCELLED" and "daemon stopped" in r[1] for r in rows)


def test_second_daemon_refused_and_cli_lifecycle(skyd_home: Path) -> None:
    with running_daemon() as d:
        second = subprocess.run(
            [sys.executable, "-m", "skyd.daemon"], env=DaemonProc().env, cwd=str(REPO),
            capture_output=True, text=True, timeout=30,
        )
        assert second.returncode == 7 and "already runs" in second.stderr
        st = cli("daemon", "status", "-o", "json")
        assert st.returncode == 0 and f'"pid": {d.pid}' in st.stdout
    st = cli("daemon", "status")
    assert st.returncode == 3 and "not running" in st.stdout
    r = cli("daemon", "start")
    assert r.returncode == 0 and "started" in r.stdout, r
    try:
        r = cli("daemon", "start")
        assert "already running" in r.stdout
    finally:
        r = cli("daemon", "stop")
    assert r.returncode == 0 and "stopped" in r.stdout
    assert cli("daemon", "stop").stdout.strip() == "skyd daemon is not running"


def test_concurrent_clients_autostart_one_daemon(skyd_home: Path) -> None:
    procs = [subprocess.Popen([str(SKYD_BIN), "status", "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    try:
        outs = [p.communicate(timeout=60) for p in procs]
        assert all(p.returncode == 0 for p in procs), outs
        assert all(o[0].strip() == "[]" for o in outs)
        log = (skyd_home / "logs" / "daemon.log").read_text()
        assert log.count("starting (home") == 1
    finally:
        assert cli("daemon", "stop").returncode == 0


def test_socket_in_a_shared_dir_leaves_the_dir_alone(tmp_path: Path) -> None:
    """SKYD_SOCKET=/tmp/x.sock must never chmod /tmp: only a dir of our own is tightened."""
    from skyd.daemon.app import bind_socket

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    sock = bind_socket(shared / "d.sock")
    try:
        assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
        assert stat.S_IMODE((shared / "d.sock").stat().st_mode) == 0o600
    finally:
        sock.close()
    own = tmp_path / "own"
    sock = bind_socket(own / "d.sock")
    sock.close()
    assert stat.S_IMODE(own.stat().st_mode) == 0o700
