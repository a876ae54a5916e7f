"""The node agent's channel is authenticated both ways: a process of another user that takes
a dead agent's port gets nothing and can do nothing; a gang job whose agent dies ends on
every node.

A real daemon, real node agents on `local`, the real CLI. The squatter runs as a second Unix
user (created here; the test needs root for that and for setpriv).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.unixnames import per_worker
from tests.support.daemon import cli, running_daemon, stop_autostarted, wait_for

SQUAT_USER = per_worker("skyd-squat")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# argv: port. Binds 127.0.0.1:port, prints "listening", then one JSON line per connection:
# every byte the client sent (hex), never answering.
SQUAT = r"""
import json, socket, sys, threading
port = int(sys.argv[1])
host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((host, port))
s.listen(16)
print("listening", flush=True)
lock = threading.Lock()
def serve(c):
    c.settimeout(8)
    data = b""
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            data += b
    except OSError:
        pass
    c.close()
    with lock:
        print(json.dumps({"hex": data.hex()}), flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# argv: port hex. Sends the bytes to 127.0.0.1:port, prints what came back (hex) within 3 s.
REPLAY = r"""
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3)
c.sendall(bytes.fromhex(sys.argv[2]))
got = b""
try:
    while True:
        b = c.recv(65536)
        if not b:
            break
        got += b
except OSError:
    pass
print(got.hex())
"""


def _as_squatter(*argv: str) -> list[str]:
    u = pwd.getpwnam(SQUAT_USER)
    return ["setpriv", f"--reuid={u.pw_uid}", f"--regid={u.pw_gid}", "--clear-groups", "--", *argv]


@pytest.fixture
def squat_user() -> str:
    if os.geteuid() != 0:
        pytest.skip("needs root: creates a second Unix user and runs a process as it")
    if not shutil.which("setpriv") or not shutil.which("useradd"):
        pytest.skip("needs setpriv and useradd (util-linux, passwd)")
    try:
        pwd.getpwnam(SQUAT_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        SQUAT_USER], check=True, capture_output=True)  # fmt: skip
    return SQUAT_USER


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _agent(home: Path, cluster: str, rank: int = 0) -> dict[str, Any]:
    return dict(json.loads((home / "local" / cluster / f"node-{rank}" / "agent.json").read_text()))


def _kill_agent(home: Path, cluster: str, rank: int = 0) -> dict[str, Any]:
    info = _agent(home, cluster, rank)
    os.kill(int(info["pid"]), signal.SIGKILL)
    wait_for(lambda: not _alive(int(info["pid"])), timeout=10)
    return info


def _secret(home: Path, cluster: str) -> str:
    import sqlite3

    with sqlite3.connect(str(home / "state.db")) as con:
        row = con.execute("SELECT handle FROM clusters WHERE name = ?", (cluster,)).fetchone()
    return str(json.loads(row[0])["token"])


def _tls_records(data: bytes) -> list[tuple[int, int]]:
    """(record content type, first handshake message type or -1) of each TLS record."""
    out = []
    while data:
        assert len(data) >= 5, data
        ctype, length = data[0], int.from_bytes(data[3:5], "big")
        body = data[5 : 5 + length]
        out.append((ctype, body[0] if ctype == 0x16 and body else -1))
        data = data[5 + length :]
    return out


def test_squatter_on_a_dead_agents_port_gets_no_credential(daemon: Any, skyd_home: Path,
                                                           squat_user: str) -> None:  # fmt: skip
    r = cli("launch", "-y", "-c", "sq", "echo first")
    assert r.returncode == 0, r.stderr
    nd = skyd_home / "local" / "sq" / "node-0"
    secret = _secret(skyd_home, "sq")
    for name in ("agent.json", "agent.crt", "agent.key", "ca.crt"):
        assert (nd / name).stat().st_mode & 0o777 == 0o600, name
    assert not (nd / "token").exists()
    assert not any(secret.encode() in f.read_bytes() for f in nd.rglob("*") if f.is_file())
    old_key = (nd / "agent.key").read_bytes()
    old = _kill_agent(skyd_home, "sq")

    squat = subprocess.Popen(_as_squatter(PYTHON, "-c", SQUAT, str(old["port"]),
                                          str(old.get("host") or "127.0.0.1")),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert squat.stdout is not None
        assert squat.stdout.readline().strip() == "listening", squat.stderr
        # The owner's next command reaches the squatter first, finds it is not its agent,
        # and restarts the agent on a new port.
        r = cli("exec", "sq", "echo second", timeout=120)
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert "second" in r.stdout and "restarted" in r.stdout + r.stderr
        assert "internal error" not in r.stderr
        new = _agent(skyd_home, "sq")
        assert new["port"] != old["port"] and new["pid"] != old["pid"]
        assert (nd / "agent.key").read_bytes() != old_key  # a new credential
    finally:
        time.sleep(0.5)
        squat.send_signal(signal.SIGKILL)
        out, _ = squat.communicate(timeout=10)
    received = [bytes.fromhex(json.loads(line)["hex"]) for line in out.splitlines() if line]
    assert received, "the daemon never tried the old port"
    for data in received:
        assert secret.encode() not in data
        assert b"authorization" not in data.lower() and b"bearer" not in data.lower()
        # nothing but a TLS ClientHello: no certificate, no key, no request
        assert data and set(_tls_records(data)) == {(0x16, 0x01)}, data[:64]

    # Whatever the squatter replays to the restarted agent gets it nothing.
    before = json.loads(cli("queue", "-o", "json", "sq").stdout)[0]["jobs"]
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    bearer = preface + b"authorization: Bearer " + secret.encode()
    for payload in (*received, preface, bearer):
        rr = subprocess.run(_as_squatter(PYTHON, "-c", REPLAY, str(new["port"]), payload.hex()),
                            capture_output=True, text=True, timeout=30)  # fmt: skip
        got = bytes.fromhex(rr.stdout.strip() or "")
        assert not got.startswith(b"\x00\x00"), got[:32]  # never an HTTP/2 frame
        if payload in (preface, bearer):
            assert got == b"" or got[0] == 0x15, got[:32]  # nothing, or a TLS alert
    after = json.loads(cli("queue", "-o", "json", "sq").stdout)[0]["jobs"]
    assert len(after) == len(before)
    r = cli("exec", "sq", "echo third", timeout=120)
    assert r.returncode == 0 and "third" in r.stdout, r.stderr


def _rank_pids(home: Path, cluster: str, n: int) -> list[int]:
    files = [home / "local" / cluster / f"node-{r}" / "home" / "rank.pid" for r in range(n)]
    wait_for(lambda: all(f.exists() and f.read_text().strip() for f in files), timeout=60)
    return [int(f.read_text()) for f in files]


@pytest.fixture
def short_rank_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents (of the daemon started after this) give up on a silent peer after 5 s."""
    monkeypatch.setenv("SKYD_RANK_LEASE_S", "5")


@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "head"])
def test_gang_job_ends_on_every_node_when_one_agent_dies(short_rank_lease: None, daemon: Any,
                                                         skyd_home: Path, victim: int) -> None:  # fmt: skip
    name = f"gd{victim}"
    r = cli("launch", "-y", "-d", "-c", name, "--num-nodes", "2",
            "echo $$ > ~/rank.pid; sleep 300", timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    pids = _rank_pids(skyd_home, name, 2)
    _kill_agent(skyd_home, name, victim)
    # The dead agent's rank goes with it, the other node's soon after (the head gives up on
    # an unreachable worker; a worker ends ranks its head stopped asking about).
    assert wait_for(lambda: not _alive(pids[victim]), timeout=10)
    # within the 5-s lease and some (the default lease alone is 30 s)
    assert wait_for(lambda: not any(_alive(p) for p in pids), timeout=25), pids
    r = cli("cancel", "-y", name, "1", timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "internal error" not in r.stderr
    r = cli("queue", "-o", "json", name)
    assert r.returncode == 0, r.stderr
    job = json.loads(r.stdout)[0]["jobs"][0]
    assert job["status"] in ("FAILED_DRIVER", "CANCELLED"), job


def test_cancel_right_after_an_agent_dies_ends_what_is_left(daemon: Any, skyd_home: Path) -> None:
    r = cli("launch", "-y", "-d", "-c", "gc", "--num-nodes", "2",
            "echo $$ > ~/rank.pid; sleep 300", timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    pids = _rank_pids(skyd_home, "gc", 2)
    _kill_agent(skyd_home, "gc", 1)
    r = cli("cancel", "-y", "gc", "1", timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "internal error" not in r.stderr
    assert wait_for(lambda: not any(_alive(p) for p in pids), timeout=15), pids


def test_exec_restarts_an_agent_the_refresher_marked_unhealthy(skyd_home: Path) -> None:
    """The refresher marks a cluster whose agent died INIT (unhealthy); `exec` still restarts
    the agent and runs (it used to refuse: "cluster is INIT")."""
    with running_daemon(SKYD_REFRESH_S="0.5"):
        try:
            r = cli("launch", "-y", "-c", "rf", "echo first")
            assert r.returncode == 0, r.stderr
            old = _kill_agent(skyd_home, "rf")

            def status() -> str:
                rows = json.loads(cli("status", "-o", "json").stdout)
                return next(str(c["status"]) for c in rows if c["name"] == "rf")

            assert wait_for(lambda: status() == "INIT", timeout=30, interval=0.3)
            r = cli("exec", "rf", "echo again", timeout=120)
            assert r.returncode == 0, (r.stdout, r.stderr)
            assert "again" in r.stdout and "restarted" in r.stdout + r.stderr
            assert _agent(skyd_home, "rf")["pid"] != old["pid"]
        finally:
            cli("down", "-a", "-y", timeout=120)
    stop_autostarted()
