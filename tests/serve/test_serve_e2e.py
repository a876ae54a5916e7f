"""`skyd serve` end to end on `local`: a real daemon, real node agents, replicas that are
real HTTP servers (tests/fakes/replica_app.py), traffic through the daemon's load balancer.
The tests that take ``daemon`` share one module daemon (what each leaves is taken down after
it); those that kill or configure a daemon run their own."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import cli, running_daemon, wait_for
from tests.support.pipeline import Env

SHARED_DAEMON_ENV: dict[str, str] = {}  # the tests taking `daemon` share one (tests/support/plugin.py)
APP = Path(__file__).resolve().parents[1] / "fakes" / "replica_app.py"


@pytest.fixture
def leave_nothing(skyd_home: Path) -> Iterator[None]:
    """For tests that run their own daemons: a failing one still takes its services down."""
    yield
    local = skyd_home / "local"
    if local.exists() and list(local.glob("sv-*")):
        with running_daemon(SKYD_EXTRA_PLUGINS="tests.fakes.preemptible"):
            cli("serve", "down", "-a")


def _yaml(tmp_path: Path, name: str, service: str, envs: str = "") -> Path:
    f = tmp_path / f"{name}.yaml"
    f.write_text(
        f"name: {name}\n"
        f"service:\n{service}"
        + (f"envs:\n{envs}" if envs else "")
        + f"run: exec {sys.executable} {APP}\n")
    return f


PROBE = ("  readiness_probe:\n    path: /health\n    initial_delay_seconds: 60\n"
         "    endpoint_probe_interval_seconds: 0.2\n"
         "    consecutive_failure_threshold_timeout: 1\n")


def _svc(name: str) -> dict[str, Any]:
    """What `skyd serve status NAME -o json` prints, read through the SDK (the polls below
    would start a CLI process every 0.2 s)."""
    from urllib.parse import quote

    from skyd.sdk.transport import Client

    with Client(autostart=False) as c:
        return dict(c.get(f"/v1/services/{quote(name, safe='')}"))


def _up(f: Path) -> dict[str, Any]:
    r = cli("serve", "up", "-o", "json", str(f))
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def _ready(name: str, n: int, timeout: float = 60.0) -> dict[str, Any]:
    def ok() -> dict[str, Any] | None:
        s = _svc(name)
        ready = [r for r in s["replicas"] if r["status"] == "READY"]
        return s if s["status"] == "READY" and len(ready) == n else None

    return dict(wait_for(ok, timeout=timeout, interval=0.2))


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_ready_round_robin_and_status(daemon: Any, tmp_path: Path) -> None:
    out = _up(_yaml(tmp_path, "rr", PROBE + "  replicas: 2\n  load_balancing_policy: round_robin\n"))
    assert out["endpoint"].startswith("http://127.0.0.1:")
    s = _ready("rr", 2)
    ports = {r["port"] for r in s["replicas"]}
    assert len(ports) == 2  # each replica got its own port on this machine
    seen = Counter(_get(out["endpoint"] + "/")[1] for _ in range(20))
    assert seen == {"replica 1": 10, "replica 2": 10}
    r = cli("serve", "status", "rr", "--endpoint")
    assert r.stdout.strip() == out["endpoint"]
    table = cli("serve", "status").stdout
    assert "READY" in table and "rr" in table


def test_affinity_keeps_a_session_on_one_replica(daemon: Any, tmp_path: Path) -> None:
    out = _up(_yaml(tmp_path, "aff", PROBE + "  replicas: 3\n  load_balancing_policy: affinity\n"
                    "  load_balancer:\n    affinity_header: X-Session-Id\n"))
    _ready("aff", 3)
    homes: dict[str, set[str]] = {}
    for i in range(12):
        for _ in range(4):
            body = json.loads(_get(out["endpoint"] + "/whoami", {"X-Session-Id": f"s{i}"})[1])
            homes.setdefault(f"s{i}", set()).add(body["replica"])
    assert all(len(v) == 1 for v in homes.values()), homes
    assert len({next(iter(v)) for v in homes.values()}) > 1  # sessions spread over replicas


def test_stream_passes_chunk_by_chunk_and_counts_stay_exact(daemon: Any, tmp_path: Path) -> None:
    out = _up(_yaml(tmp_path, "st", PROBE + "  replicas: 1\n"))
    _ready("st", 1)
    host, port = out["endpoint"].removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET /stream?n=4&delay=0.4 HTTP/1.1\r\nHost: x\r\n\r\n")
        arrivals: list[float] = []
        data = b""
        t0 = time.monotonic()
        while data.count(b"token ") < 4:
            chunk = s.recv(65536)
            assert chunk
            data += chunk
            while len(arrivals) < data.count(b"token "):
                arrivals.append(time.monotonic() - t0)
    # the first token arrived while the replica was still producing the others
    assert arrivals[0] < arrivals[-1] - 0.8, arrivals
    # a client that goes away mid-stream leaves no in-flight count behind
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET /stream?n=50&delay=0.1 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(65536)
    wait_for(lambda: set(_svc("st")["load_balancer"]["inflight"].values()) == {0}, timeout=15)


def test_least_load_sends_concurrent_streams_to_idle_replicas(daemon: Any, tmp_path: Path) -> None:
    out = _up(_yaml(tmp_path, "ll", PROBE + "  replicas: 2\n  load_balancing_policy: least_load\n"))
    _ready("ll", 2)
    host, port = out["endpoint"].removeprefix("http://").split(":")
    socks = []
    for _ in range(2):  # two long requests in flight at once
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(b"GET /stream?n=30&delay=0.1 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(65536)
        socks.append(s)
    inflight = _svc("ll")["load_balancer"]["inflight"]
    assert sorted(inflight.values()) == [1, 1], inflight
    for s in socks:
        s.close()


def test_killed_replica_is_replaced(daemon: Any, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    out = _up(_yaml(tmp_path, "kr", PROBE + "  replicas: 2\n", envs=f"  PID_DIR: {pids}\n"))
    _ready("kr", 2)
    os.kill(int((pids / "1.pid").read_text()), signal.SIGKILL)

    def replaced() -> dict[str, Any] | None:
        s = _svc("kr")
        by_id = {r["replica_id"]: r for r in s["replicas"]}
        ready = sorted(i for i, r in by_id.items() if r["status"] == "READY")
        return s if ready == [2, 3] and by_id[1]["status"] == "FAILED" else None

    s = wait_for(replaced, timeout=60, interval=0.2)
    assert "ended" in s["replicas"][0]["status_reason"]
    assert Counter(_get(out["endpoint"] + "/")[1] for _ in range(10)) == {"replica 2": 5,
                                                                           "replica 3": 5}


def test_daemon_kill9_then_ready_again_with_the_same_replicas(skyd_home: Path, tmp_path: Path,
        leave_nothing: None) -> None:
    with running_daemon() as d:
        out = _up(_yaml(tmp_path, "k9", PROBE + "  replicas: 2\n"))
        before = _ready("k9", 2)
        d.kill9()
        with running_daemon():
            after = _ready("k9", 2)
            key = [(r["replica_id"], r["url"], r["cluster"]) for r in before["replicas"]]
            assert [(r["replica_id"], r["url"], r["cluster"]) for r in after["replicas"]] == key
            assert _get(out["endpoint"] + "/")[0] == 200
            assert cli("serve", "down", "k9").returncode == 0
            assert cli("serve", "status", "-o", "json").stdout.strip() == "[]"
    assert not list((skyd_home / "local").glob("sv-k9-*"))


def test_no_ready_replica_answers_503_with_the_reason(daemon: Any, tmp_path: Path) -> None:
    out = _up(_yaml(tmp_path, "zero", PROBE + "  replicas: 0\n"))
    wait_for(lambda: _svc("zero")["status"] == "NO_REPLICA", timeout=20)
    code, body = _get(out["endpoint"] + "/")
    assert code == 503 and "no replica" in body


BAD = {
    "no_probe": ("  replicas: 1\n", "readiness_probe"),
    "probe_without_path": ("  readiness_probe:\n    initial_delay_seconds: 5\n  replicas: 1\n",
                           "readiness_probe"),
    "negative": ("  readiness_probe: /health\n  replicas: -1\n", "replicas"),
    "min_over_max": ("  readiness_probe: /health\n  replica_policy:\n    min_replicas: 3\n"
                     "    max_replicas: 2\n    target_qps_per_replica: 1\n", "max_replicas"),
    "no_target_qps": ("  readiness_probe: /health\n  replica_policy:\n    min_replicas: 1\n"
                      "    max_replicas: 2\n", "target_qps_per_replica"),
    "tls_missing": ("  readiness_probe: /health\n  replicas: 1\n  tls:\n"
                    "    keyfile: /nonexistent/k.pem\n    certfile: /nonexistent/c.pem\n", "tls"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_one_message_nothing_launched(daemon: Any, shared: Env, tmp_path: Path,
                                                case: str) -> None:
    skyd_home = shared.home
    body, word = BAD[case]
    r = cli("serve", "up", str(_yaml(tmp_path, "bad", body)))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert word in r.stderr and "Traceback" not in r.stderr
    assert cli("serve", "status", "-o", "json").stdout.strip() == "[]"
    assert not (skyd_home / "local").exists() or not list((skyd_home / "local").iterdir())


def test_port_in_use_is_refused(daemon: Any, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = cli("serve", "up", str(_yaml(tmp_path, "busy", PROBE + f"  replicas: 1\n  ports: {port}\n")))
    assert r.returncode == 2 and f"port {port}" in r.stderr, r.stderr
    assert cli("serve", "status", "-o", "json").stdout.strip() == "[]"


def test_rolling_update_under_steady_load_fails_no_request(daemon: Any, tmp_path: Path) -> None:
    import threading

    out = _up(_yaml(tmp_path, "ru", PROBE + "  replicas: 2\n", envs="  V: one\n"))
    _ready("ru", 2)
    stop = threading.Event()
    results: list[tuple[int, str]] = []

    def load() -> None:
        while not stop.is_set():
            try:
                results.append(_get(out["endpoint"] + "/"))
            except OSError as e:
                results.append((0, repr(e)))

    t = threading.Thread(target=load)
    t.start()
    try:
        new = _yaml(tmp_path, "ru2", PROBE + "  replicas: 2\n", envs="  V: two\n")
        r = cli("serve", "update", "ru", str(new))
        assert r.returncode == 0, r.stderr

        def rolled() -> bool:
            s = _svc("ru")
            return s["version"] == 2 and sorted(
                (x["replica_id"], x["status"], x["version"]) for x in s["replicas"]) == [
                (3, "READY", 2), (4, "READY", 2)]

        wait_for(rolled, timeout=90, interval=0.2)
        n = len(results)
        wait_for(lambda: len(results) > n + 20, timeout=20)
    finally:
        stop.set()
        t.join(20)
    bad = [x for x in results if x[0] != 200]
    assert not bad, bad[:5]
    assert {b for _, b in results[-10:]} <= {"replica 3", "replica 4"}
    assert {"replica 1", "replica 2"} & {b for _, b in results}


def test_load_spike_upscales_after_the_delay_and_idle_downscales(
        skyd_home: Path, tmp_path: Path, leave_nothing: None) -> None:
    import threading

    policy = ("  replica_policy:\n    min_replicas: 1\n    max_replicas: 2\n"
              "    target_qps_per_replica: 5\n    upscale_delay_seconds: 1\n"
              "    downscale_delay_seconds: 3\n")
    with running_daemon(SKYD_SERVE_QPS_WINDOW="2"):
        out = _up(_yaml(tmp_path, "as", PROBE + policy))
        _ready("as", 1)
        stop = threading.Event()

        def load() -> None:
            while not stop.is_set():
                _get(out["endpoint"] + "/")

        t = threading.Thread(target=load)
        t.start()
        try:
            s = _ready("as", 2, timeout=60)
            assert "upscale" in s["autoscaler"]["reason"] or s["autoscaler"]["target"] == 2
        finally:
            stop.set()
            t.join(20)
        s = wait_for(lambda: (lambda v: v if [r["status"] for r in v["replicas"]] == ["READY"]
                              else None)(_svc("as")), timeout=60, interval=0.2)
        assert s["status"] == "READY"
        log = cli("serve", "logs", "as", "--no-follow").stdout
        assert "upscale 1 -> 2" in log and "downscale 2 -> 1" in log
        assert cli("serve", "down", "as").returncode == 0


def test_preempted_spot_replica_is_replaced(skyd_home: Path, tmp_path: Path,
        leave_nothing: None) -> None:
    import anyio

    from tests.fakes import preemptible

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    f = tmp_path / "spot.yaml"
    f.write_text("name: spot\nresources:\n  infra: fakecloud\n  use_spot: true\n"
                 f"service:\n{PROBE}  replicas: 1\n  ports: {port}\n"
                 f"run: exec {sys.executable} {APP}\n")
    with running_daemon(SKYD_EXTRA_PLUGINS="tests.fakes.preemptible"):
        out = _up(f)
        first = _ready("spot", 1)["replicas"][0]
        assert first["cloud"] == "fakecloud" and first["port"] == port
        assert anyio.run(preemptible.PreemptibleProvisioner().preempt, first["cluster"]) > 0

        def replaced() -> dict[str, Any] | None:
            s = _svc("spot")
            st = {r["replica_id"]: r["status"] for r in s["replicas"]}
            return s if st == {1: "PREEMPTED", 2: "READY"} else None

        wait_for(replaced, timeout=90, interval=0.3)
        assert _get(out["endpoint"] + "/") == (200, "replica 2")
        assert cli("serve", "down", "spot").returncode == 0
