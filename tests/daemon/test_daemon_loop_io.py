"""No blocking file I/O on the daemon's event loop: request event logs (written per event,
read by followers, counted at restart), task YAML parsing, managed-job logs, known_hosts.

The daemon runs in this test's own event loop; a guard wraps ``open`` (builtins and io, so
pathlib too) and PyYAML's loaders and records every call made on the loop's thread."""

from __future__ import annotations

import builtins
import io
import json
import logging
import os
import sqlite3
import threading
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from skyd import paths
from skyd.daemon.app import Daemon
from skyd.daemon.registry import register_verb
from skyd.sdk.aio import AsyncClient
from skyd.sdk.transport import socket_answers

pytestmark = pytest.mark.anyio


class LoopIOGuard:
    """Records open() of files under ``roots`` and YAML parsing done on the loop thread."""

    def __init__(self, roots: list[Path], skip: Callable[[str], bool]) -> None:
        self.roots = [str(r) for r in roots]
        self.skip = skip
        self.loop_thread: int | None = None
        self.hits: list[str] = []

    def _record(self, what: str) -> None:
        if threading.get_ident() == self.loop_thread:
            where = "".join(traceback.format_stack(limit=6)[:-2])
            self.hits.append(f"{what} on the event loop, from:\n{where}")

    def wrap_open(self, real: Any) -> Any:
        def guarded(file: Any, *a: Any, **kw: Any) -> Any:
            if isinstance(file, str | os.PathLike):
                p = os.fspath(file)
                if isinstance(p, str) and any(p.startswith(r) for r in self.roots) and not self.skip(p):
                    self._record(f"open({p!r})")
            return real(file, *a, **kw)

        return guarded

    def wrap_call(self, name: str, real: Any) -> Any:
        def guarded(*a: Any, **kw: Any) -> Any:
            self._record(name)
            return real(*a, **kw)

        return guarded


@pytest.fixture
def guard(skyd_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopIOGuard]:
    # Not guarded: the daemon's own log (logging) and the managed-jobs simulation's state.
    g = LoopIOGuard([skyd_home], skip=lambda p: os.path.basename(p).startswith(("daemon.log", "jobs-sim")))
    monkeypatch.setattr(builtins, "open", g.wrap_open(builtins.open))
    monkeypatch.setattr(io, "open", g.wrap_open(io.open))
    for name in ("safe_load", "safe_load_all", "compose_all"):
        monkeypatch.setattr(yaml, name, g.wrap_call(f"yaml.{name}", getattr(yaml, name)))
    yield g
    root = logging.getLogger()  # the in-process daemon's log handlers
    for h in [h for h in root.handlers if getattr(h, "_skyd", False)]:
        root.removeHandler(h)
        h.close()


@asynccontextmanager
async def daemon_in_loop(g: LoopIOGuard) -> AsyncIterator[Daemon]:
    g.loop_thread = threading.get_ident()
    d = Daemon(grace=2.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(d.serve)
        with anyio.fail_after(30):
            while not await anyio.to_thread.run_sync(socket_answers, paths.socket_path()):
                await anyio.sleep(0.02)
        try:
            yield d
        finally:
            d.request_stop()


def _mark_running(rid: str) -> None:
    """What a daemon killed mid-request leaves in SQLite."""
    with sqlite3.connect(paths.db_path()) as db:
        db.execute("UPDATE requests SET status = 'RUNNING', finished_at = NULL, error = NULL "
                   "WHERE id = ?", (rid,))


async def _resumable(ctx: Any, payload: dict[str, Any]) -> Any:
    ctx.log("resumed" if ctx.resumed else "first run")
    if not ctx.resumed:
        await anyio.sleep(60)  # until the daemon stops: it is resumed by the next one
    return {"resumed": ctx.resumed}


register_verb("test.loop_io.resumable", _resumable, resumable=True)


async def test_request_log_writes_follows_and_restart_stay_off_the_loop(guard: LoopIOGuard) -> None:
    async with daemon_in_loop(guard), AsyncClient(autostart=False) as c:
        rid = await c.submit("sleep", {"seconds": 0.3, "log_every": 0.05})
        live = [ev async for ev in c.stream(rid, follow=True)]
        assert [e["type"] for e in live][-1] == "result"
        assert [e["seq"] for e in live] == list(range(1, len(live) + 1))
        assert sum(e["type"] == "log" for e in live) == 6
        replay = [ev async for ev in c.stream(rid, follow=False)]
        assert replay == live  # everything a follower saw is in the log file
        res = await c.submit("test.loop_io.resumable", {})
        async for ev in c.stream(res, follow=True):
            if ev.get("text") == "first run\n":
                break
    _mark_running(rid)  # as if the daemon had been killed while it ran
    async with daemon_in_loop(guard), AsyncClient(autostart=False) as c:
        evs = [ev async for ev in c.stream(res, follow=True)]
        assert evs[-1]["type"] == "result" and evs[-1]["result"] == {"resumed": True}
        assert [e.get("status") for e in evs if e["type"] == "status"] == ["RUNNING", "INTERRUPTED", "RUNNING"]
        assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))  # counted at restart
        last = [ev async for ev in c.stream(rid, follow=False)][-1]
        assert last["type"] == "result"  # the replay ends at the first terminal event
        lines = (await anyio.Path(paths.request_log(rid)).read_bytes()).splitlines()
        err = json.loads(lines[-1])
        assert err["type"] == "error" and err["error"]["message"] == "daemon restarted"
        assert err["seq"] == len(live) + 1
    assert guard.hits == [], "\n".join(guard.hits)


async def test_event_log_durable_after_the_request(guard: LoopIOGuard) -> None:
    """Every event of a finished request is in its log file (the replay source), in order."""
    async with daemon_in_loop(guard), AsyncClient(autostart=False) as c:
        rids = [await c.submit("sleep", {"seconds": 0.2, "log_every": 0.01}) for _ in range(5)]
        for rid in rids:
            await c.wait(rid)
            lines = (await anyio.Path(paths.request_log(rid)).read_bytes()).splitlines()
            evs = [json.loads(x) for x in lines]
            assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
            assert evs[-1]["type"] == "result"
            # every tick's line, none missing (how many ticks fit in 0.2 s depends on the load)
            ticks = [e["text"] for e in evs if e["type"] == "log"]
            assert ticks and ticks == [f"slept {min(k * 0.01, 0.2):.1f}s of 0.2s\n"
                                       for k in range(1, len(ticks) + 1)]
    assert guard.hits == [], "\n".join(guard.hits)


async def test_managed_job_launch_and_saved_logs_off_the_loop(
    guard: LoopIOGuard, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKYD_JOBS_SIM", "1")
    async with daemon_in_loop(guard), AsyncClient(autostart=False) as c:
        rid = await c.submit("jobs.launch", {"yaml": "name: j\nrun: echo hi\n", "name": "j"})
        jid = int((await c.wait(rid))["job_id"])
        with anyio.fail_after(30):
            while True:
                job = await c.get(f"/v1/jobs/{jid}")
                if job["status"] in ("SUCCEEDED", "FAILED", "FAILED_SETUP", "CANCELLED"):
                    break
                await anyio.sleep(0.1)
        saved = paths.logs_dir() / "managed"
        saved.mkdir(parents=True, exist_ok=True)
        # A saved log bigger than one read, with a multi-byte character across the boundary.
        body = "a" * (256 * 1024 - 1) + "é" + "tail-of-log\n"
        await anyio.Path(saved / f"skyd-jobs-{jid}-1.log").write_text(body)
        text = ""
        async for item in c.stream_ndjson(f"/v1/jobs/{jid}/logs", {"follow": 0}):
            text += item["text"]
        assert text.startswith(body) and "é" in text
        ctl = ""
        async for item in c.stream_ndjson(f"/v1/jobs/{jid}/logs", {"controller": 1}):
            ctl += item["text"]
        assert f"job {jid}: " in ctl  # the controller's own log, written off the loop
    assert guard.hits == [], "\n".join(guard.hits)


async def test_launch_dryrun_parses_off_the_loop(guard: LoopIOGuard, tmp_path: Path) -> None:
    import skyd

    guard.roots.append(str(Path(skyd.__file__).parent / "clouds"))  # the bundled catalogs
    async with daemon_in_loop(guard), AsyncClient(autostart=False) as c:
        rid = await c.submit("launch", {"yaml": "resources:\n  cpus: 2\nrun: echo hi\n",
                                        "dryrun": True, "base_dir": str(tmp_path)})
        out = await c.wait(rid)
        assert out
    assert guard.hits == [], "\n".join(guard.hits)


async def test_ssh_connect_reads_known_hosts_off_the_loop(guard: LoopIOGuard, tmp_path: Path) -> None:
    from skyd.transports.ssh import SSHTarget, SSHTransport, known_hosts_path
    from tests.fakes.sshhost import FakeSSHHost, make_keypair

    guard.roots.append(str(Path("~/.ssh").expanduser()))
    priv, pub = make_keypair(tmp_path / "k")
    async with FakeSSHHost(tmp_path / "h", "127.0.0.2", pub) as h:
        target = SSHTarget(h.host, h.port, "skyd", str(priv))
        async with SSHTransport(target) as t:  # first contact records the host key
            assert (await t.run("echo one")).stdout == "one\n"
        assert await anyio.Path(known_hosts_path()).exists()
        guard.loop_thread = threading.get_ident()
        for _ in range(3):  # every later connect reads both known_hosts files
            async with SSHTransport(target) as t:
                assert (await t.run("echo again")).stdout == "again\n"
    assert guard.hits == [], "\n".join(guard.hits)


async def test_agent_log_tail_reads_off_the_loop(guard: LoopIOGuard, skyd_home: Path) -> None:
    from skyd.nodeagent.logs import tail_file

    log = skyd_home / "rank-0.log"
    await anyio.Path(log).write_bytes(b"".join(b"line %d\n" % i for i in range(100_000)))
    guard.loop_thread = threading.get_ident()
    got = b"".join([c async for c in tail_file(log, follow=False, tail=3, is_done=lambda: True)])
    assert got == b"line 99997\nline 99998\nline 99999\n"
    whole = b"".join([c async for c in tail_file(log, follow=False, tail=0, is_done=lambda: True)])
    assert whole.count(b"\n") == 100_000
    assert guard.hits == [], "\n".join(guard.hits)


async def test_ssh_pools_and_host_facts_read_off_the_loop(guard: LoopIOGuard, tmp_path: Path) -> None:
    """The daemon's start probes unprobed pool hosts (pools file, hosts.json); a dry run
    on the ssh infra plans over them."""
    import socket

    with socket.socket() as s:  # a port nothing listens on: the probe fails fast
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = Path(os.environ["SKYD_CONFIG_DIR"])
    await anyio.Path(cfg).mkdir(parents=True, exist_ok=True)
    await anyio.Path(cfg / "ssh_node_pools.yaml").write_text(
        f"mypool:\n  hosts:\n    - ip: 127.0.0.1\n      port: {port}\n")
    guard.roots.append(str(cfg))
    async with daemon_in_loop(guard), AsyncClient(autostart=False) as c:
        rid = await c.submit("launch", {"yaml": "resources:\n  infra: ssh/mypool\nrun: echo hi\n",
                                        "dryrun": True, "base_dir": str(tmp_path)})
        async for _ in c.stream(rid):
            pass
        await anyio.sleep(0.5)  # the start-up probe's attempt
    assert guard.hits == [], "\n".join(guard.hits)
