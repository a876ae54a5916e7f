"""Bounded resources under hostile or careless clients, with real sockets on the daemon's
Unix socket: sizes at entry, half-open and idle connections, a connection limit that still
serves a new client, and an idempotent submit under a client-chosen id."""

from __future__ import annotations

import json
import os
import resource
import socket
import threading
import time
from pathlib import Path

import pytest

from skyd.errors import SkydError
from skyd.sdk.transport import Client
from tests.support.daemon import cli, running_daemon, sock_path, stop_autostarted, wait_for


def raw(path: str, data: bytes, timeout: float = 10.0) -> tuple[int, dict]:  # type: ignore[type-arg]
    """Send raw bytes, read the whole answer: (status, JSON body)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon answered and closed before taking the whole body
        buf = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            buf += chunk
            head, _, body = buf.partition(b"\r\n\r\n")
            clen = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
            if clen and len(body) >= int(clen[0].split(b":")[1]):
                break
    finally:
        s.close()
    head, _, body = buf.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body or b"{}")


def post(verb: str, body: bytes) -> bytes:
    return (f"POST /v1/requests/{verb} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


# -- sizes at entry ---------------------------------------------------------------------
def test_a_14mb_command_is_refused_and_nothing_is_stored(skyd_home: Path) -> None:
    cmd = "echo " + "x" * (14 * 1024 * 1024)
    body = json.dumps({"command": cmd, "cluster_name": "c1", "base_dir": "/"}).encode()
    with running_daemon(), Client(autostart=False) as c:
        status, doc = raw(sock_path(), post("exec", body))
        assert status == 413, doc
        assert doc["error"]["field"] == "body" and "too large" in doc["error"]["message"]
        assert doc["error"]["exit_code"] == 2
        assert c.get("/v1/requests", {"limit": 50}) == []


def test_field_caps_name_the_field(skyd_home: Path) -> None:
    """A task YAML of 2 MiB (a `run` of megabytes), an exec command of 2 MiB and an env value
    longer than a process can receive are refused with 413 naming the field, before a row
    exists; the CLI exits 2."""
    big_yaml = "resources:\n  infra: local\nrun: |\n  echo " + "y" * (2 * 1024 * 1024) + "\n"
    cases = [
        ("launch", {"yaml": big_yaml, "cluster_name": "c1", "base_dir": "/"}, "yaml"),
        ("exec", {"command": "echo " + "z" * (2 * 1024 * 1024), "cluster_name": "c1",
                  "base_dir": "/"}, "command"),
        ("launch", {"yaml": "run: echo\n", "cluster_name": "c1", "base_dir": "/",
                    "env": {"BIG": "v" * (200 * 1024)}}, "env.BIG"),
        ("launch", {"yaml": "run: echo\n", "cluster_name": "c1", "base_dir": "/",
                    "env": {f"E{i}": "v" * (100 * 1024) for i in range(12)}}, "env."),
    ]
    with running_daemon(), Client(autostart=False) as c:
        for verb, body, field in cases:
            status, doc = raw(sock_path(), post(verb, json.dumps(body).encode()))
            assert status == 413, (field, doc)
            assert doc["error"]["field"].startswith(field), doc
            assert doc["error"]["exit_code"] == 2
        assert c.get("/v1/requests", {"limit": 50}) == []
        task = skyd_home / "big.yaml"
        task.write_text(big_yaml)
        r = cli("launch", "-y", "-c", "c1", str(task))
        assert r.returncode == 2, r.stderr
        assert "larger than" in r.stderr  # the CLI refuses it before sending


# -- connections -------------------------------------------------------------------------
@pytest.fixture
def many_fds() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))


def test_half_open_connections_are_closed_at_the_header_deadline(skyd_home: Path,
                                                                 many_fds: None) -> None:
    with running_daemon(SKYD_HEADER_TIMEOUT="1"), Client(autostart=False) as c:
        socks = []
        for _ in range(300):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sock_path())
            s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")  # never finished
            socks.append(s)
        t0 = time.monotonic()
        try:
            for s in socks:
                s.settimeout(max(0.1, 8 - (time.monotonic() - t0)))
                assert s.recv(1024) == b""  # closed by the daemon
            assert time.monotonic() - t0 < 8
            assert c.get("/v1/health")["status"] == "ok"
        finally:
            for s in socks:
                s.close()


def test_idle_connections_past_the_limit_never_block_a_new_client(skyd_home: Path,
                                                                  many_fds: None) -> None:
    """2,000 idle connections against a limit of 200: the oldest idle ones are closed, a new
    client's /v1/health answers at once."""
    with running_daemon(SKYD_MAX_CONNECTIONS="200"):
        socks = []
        try:
            for _ in range(2000):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(sock_path())
                socks.append(s)
            t0 = time.monotonic()
            with Client(autostart=False, timeout=10) as c:
                assert c.get("/v1/health")["status"] == "ok"
            assert time.monotonic() - t0 < 5
            closed = 0
            for s in socks[:1500]:
                s.settimeout(5)
                try:
                    closed += s.recv(1) == b""
                except TimeoutError:
                    pass
            assert closed >= 1500 - 200
        finally:
            for s in socks:
                s.close()


def test_a_full_house_of_busy_streams_refuses_with_a_message(skyd_home: Path) -> None:
    with running_daemon(SKYD_MAX_CONNECTIONS="6"), Client(autostart=False) as c:
        rid = c.submit("sleep", {"seconds": 30, "log_every": 1})
        c.close()
        streams = []
        try:
            for _ in range(6):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(10)
                s.connect(sock_path())
                s.sendall(f"GET /v1/requests/{rid}/events?follow=1 HTTP/1.1\r\nHost: x\r\n\r\n"
                          .encode())
                assert s.recv(20).startswith(b"HTTP/1.1 200")
                streams.append(s)
            status, doc = raw(sock_path(), b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status == 503
            assert "busy" in doc["error"]["message"] and doc["error"]["exit_code"] == 7
            # A submit meanwhile waits for a free slot (the same id: it runs once) ...
            got: list[str] = []
            sub = threading.Thread(target=lambda: got.append(
                Client(autostart=False).submit("sleep", {"seconds": 0}, request_id="feedbeef")))
            sub.start()
            time.sleep(1.0)
            assert not got  # still refused: every slot is busy
        finally:
            for s in streams:
                s.close()
        sub.join(20)  # ... and goes through once one frees up
        assert got == ["feedbeef"]
        with Client(autostart=False) as c2:
            wait_for(lambda: _health(c2), timeout=10)
            c2.delete(f"/v1/requests/{rid}")
            assert [r["id"] for r in c2.get("/v1/requests", {"verb": "sleep"})
                    ].count("feedbeef") == 1


def _health(c: Client) -> bool:
    try:
        return bool(c.get("/v1/health"))
    except SkydError:
        c.close()
        return False


# -- idempotent submit ---------------------------------------------------------------------
def test_a_resubmit_under_the_same_id_runs_once(skyd_home: Path) -> None:
    with running_daemon(), Client(autostart=False) as c:
        a = c.submit("sleep", {"seconds": 0.2}, request_id="0123abcd")
        b = c.submit("sleep", {"seconds": 0.2}, request_id="0123abcd")
        assert a == b == "0123abcd"
        rows = c.get("/v1/requests", {"limit": 10})
        assert [r["id"] for r in rows] == ["0123abcd"]
        with pytest.raises(SkydError, match="already used"):
            c.submit("sleep", {"seconds": 5}, request_id="0123abcd")
        assert len(c.get("/v1/requests", {"limit": 10})) == 1


def test_cli_resubmits_when_the_daemon_died_before_accepting(skyd_home: Path) -> None:
    """A 'daemon' that reads the request and dies without answering (its socket file left
    behind): the CLI starts a real daemon, sends the same request under the same id, and
    follows it to the end; exactly one request exists, with the id the CLI chose."""
    path = sock_path()
    seen: dict[str, str] = {}
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lst.bind(path)
    lst.listen(4)

    def dying_daemon() -> None:
        conn, _ = lst.accept()
        buf = b""
        conn.settimeout(10)
        while b"\r\n\r\n" not in buf:
            buf += conn.recv(65536)
        for ln in buf.split(b"\r\n"):
            if ln.lower().startswith(b"x-skyd-request-id:"):
                seen["id"] = ln.split(b":", 1)[1].strip().decode()
        conn.close()
        lst.close()  # killed: the socket file stays, nobody listens

    t = threading.Thread(target=dying_daemon)
    t.start()
    try:
        r = cli("down", "-a", "-y", timeout=90)
        t.join(10)
        assert r.returncode == 0, r.stderr
        assert "id" in seen
        with Client(autostart=False) as c:
            rows = c.get("/v1/requests", {"limit": 10})
        assert [(x["id"], x["verb"], x["status"]) for x in rows] == [(seen["id"], "down",
                                                                      "SUCCEEDED")]
    finally:
        lst.close()
        stop_autostarted()
        if os.path.exists(path):
            os.unlink(path)
