"""The load balancer's access log: a line per request (time, replica, status, bytes,
latency), written by the controller, bounded on disk, read by `serve logs --load-balancer`."""

from __future__ import annotations

import re
import urllib.request
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from skyd.serve.access import AccessLog, append_rotating
from skyd.serve.lb import LoadBalancer
from tests.serve.test_serve_e2e import PROBE, _ready, _up, _yaml
from tests.serve.test_serve_lb import IMPLS
from tests.serve.test_serve_lb import _rig as _rig_gen
from tests.support.daemon import cli, running_daemon, wait_for

_rig = asynccontextmanager(_rig_gen)
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z replica=(\S+) status=(\S+) "
                  r"bytes=(\d+) latency_ms=([\d.]+) (\S+) (\S+)$")


@pytest.mark.anyio
@pytest.mark.parametrize("cls", IMPLS)
async def test_one_entry_per_request_whatever_the_outcome(cls: type[LoadBalancer]) -> None:
    async with _rig(cls, 2, "round_robin") as rig, aiohttp.ClientSession() as s:
        for _ in range(4):
            async with s.get(rig.url + "/?token=secret") as r:
                body = await r.read()
        async with s.get(rig.url + "/stream?n=3&delay=0.01") as r:
            await r.read()
        rig.lb.set_replicas([], "no replica for now")
        async with s.get(rig.url + "/x") as r:
            assert r.status == 503
        lines = rig.lb.access.drain().splitlines()
    got = [LINE.match(ln) for ln in lines]
    assert all(got), lines
    rows = [m.groups() for m in got if m]
    assert [r[0] for r in rows] == ["1", "2", "1", "2", "1", "-"]
    assert [r[1] for r in rows] == ["200"] * 5 + ["503"]
    assert all(int(r[2]) > len(body) for r in rows[:4])  # the whole answer, head included
    assert rows[0][4:] == ("GET", "/")  # no query string (it may carry secrets)
    assert "secret" not in "".join(lines)
    assert rows[-1][5] == "/x"


def test_file_stays_bounded(tmp_path: Path) -> None:
    log, path = AccessLog(), tmp_path / "svc.access.log"
    for i in range(300):
        log.record(0.0, 1, 200, i, b"GET", b"/p")
        append_rotating(path, log.drain(), 2000)
    old = path.with_name("svc.access.log.1")
    assert path.stat().st_size <= 2000 and old.stat().st_size <= 2000
    assert "bytes=299 " in path.read_text().splitlines()[-1]


def test_serve_logs_load_balancer(skyd_home: Path, tmp_path: Path) -> None:
    with running_daemon(SKYD_SERVE_ACCESS_LOG_MAX="6000"):
        try:
            out = _up(_yaml(tmp_path, "acc", PROBE + "  replicas: 2\n"))
            _ready("acc", 2)
            for _ in range(150):
                with urllib.request.urlopen(out["endpoint"] + "/", timeout=10) as r:
                    r.read()

            def logged() -> list[str] | None:
                r = cli("serve", "logs", "acc", "--load-balancer", "--no-follow")
                assert r.returncode == 0, r.stderr
                lines = [ln for ln in r.stdout.splitlines() if ln]
                return lines if lines and all(LINE.match(ln) for ln in lines) and \
                    len(lines) >= 40 and "replica=" in lines[-1] else None

            lines = wait_for(logged, timeout=15, interval=0.5)
            assert len(lines) < 150  # bounded: the oldest lines were rotated away
            assert {m.group(1) for ln in lines if (m := LINE.match(ln))} == {"1", "2"}
            files = list((skyd_home).rglob("acc.access.log*"))
            assert files and all(f.stat().st_size <= 6000 for f in files)
            ctl = cli("serve", "logs", "acc", "--no-follow").stdout
            assert "READY" in ctl and "latency_ms=" not in ctl  # the controller's log is apart
        finally:
            cli("serve", "down", "-a")
