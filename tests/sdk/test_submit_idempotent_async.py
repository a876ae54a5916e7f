"""The async SDK and the TUI submit under a client-chosen request id, like the CLI: a daemon
that died after reading a request and before answering it is restarted, the same request is
sent again under the same id, and the work runs exactly once."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyd.errors import SkydError
from skyd.sdk.aio import AsyncClient
from skyd.sdk.transport import Client
from skyd.tui.client import TuiClient
from tests.support.daemon import running_daemon, sock_path, stop_autostarted


class DyingDaemon:
    """Listens on the daemon's socket, reads one request to its end of headers (it was
    accepted by the kernel, never answered) and dies: the socket file stays, nobody listens."""

    def __init__(self) -> None:
        self.path = sock_path()
        self.seen: dict[str, str] = {}
        self.lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.lst.bind(self.path)
        self.lst.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.lst.accept()
        buf = b""
        conn.settimeout(10)
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                break
            buf += chunk
        for ln in buf.split(b"\r\n"):
            if ln.lower().startswith(b"x-skyd-request-id:"):
                self.seen["id"] = ln.split(b":", 1)[1].strip().decode()
        conn.close()
        self.lst.close()

    def close(self) -> None:
        self.lst.close()
        self.thread.join(10)


@pytest.fixture
def dying(skyd_home: Path) -> Iterator[DyingDaemon]:
    d = DyingDaemon()
    try:
        yield d
    finally:
        d.close()
        stop_autostarted()
        if os.path.exists(d.path):
            os.unlink(d.path)


async def _resubmitted_once(client: AsyncClient, dying: DyingDaemon) -> None:
    async with client as c:
        rid = await c.submit("sleep", {"seconds": 0.1})
        assert (await c.wait(rid))["slept"] >= 0.1
    assert dying.seen.get("id") == rid  # the first (lost) try carried the id that ran
    with Client(autostart=False) as sc:
        rows = sc.get("/v1/requests", {"limit": 10})
    assert [(x["id"], x["verb"], x["status"]) for x in rows] == [(rid, "sleep", "SUCCEEDED")]


@pytest.mark.anyio
async def test_async_sdk_resubmits_when_the_daemon_died_before_accepting(
        dying: DyingDaemon) -> None:
    await _resubmitted_once(AsyncClient(autostart=True), dying)


@pytest.mark.anyio
async def test_tui_client_resubmits_when_the_daemon_died_before_accepting(
        dying: DyingDaemon) -> None:
    await _resubmitted_once(TuiClient(autostart=True), dying)


@pytest.mark.anyio
async def test_async_resubmit_under_the_same_id_runs_once(skyd_home: Path) -> None:
    with running_daemon():
        async with AsyncClient(autostart=False) as c:
            a = await c.submit("sleep", {"seconds": 0.1}, request_id="0123abcd")
            b = await c.submit("sleep", {"seconds": 0.1}, request_id="0123abcd")
            assert a == b == "0123abcd"
            assert [r["id"] for r in await c.requests_ls()] == ["0123abcd"]
            with pytest.raises(SkydError, match="already used"):
                await c.submit("sleep", {"seconds": 5}, request_id="0123abcd")
            # without a chosen id, two submits are two requests, each under an id picked here
            x = await c.submit("sleep", {"seconds": 0})
            y = await c.submit("sleep", {"seconds": 0})
            assert x != y and len(await c.requests_ls()) == 3
            await c.wait(a)
