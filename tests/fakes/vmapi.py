"""The common part of the fake VM-provider APIs (tests/fakes/doapi.py, crusoeapi.py): an
aiohttp app on 127.0.0.1 on its own event loop in a thread (so it outlives daemons the tests
kill), rate limiting with Retry-After, and instances that are fake SSH hosts
(tests/fakes/sshhost.py) on loopback addresses 127.0.0.x, all on one SSH port.

Knobs shared by every fake: ``rate_limit(n, retry_after)`` (the next ``n`` requests get 429
with that Retry-After), ``boot_s`` (how long a new instance takes to run: a slow operation),
``pause_at("before_running")`` with ``reached`` / ``release()`` (a new instance waits there,
made but not running, e.g. while a test kills the daemon).
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import shutil
import socket
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.sshhost import FakeSSHHost


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeVMAPI:
    def __init__(self, root: Path, *, first_ip: int, ssh_port: int = 0, gpu: str = "mi300x") -> None:
        self.root = root
        self.port = 0
        self.ssh_port = ssh_port or free_port()
        self.gpu = gpu
        self.boot_s = 0.0
        self.hosts: dict[str, FakeSSHHost] = {}  # instance id -> its SSH host
        self.handed_out: list[str] = []
        self.calls: list[tuple[str, str]] = []
        self.rate_limited = 0  # 429s answered
        self.server_s = 0.0
        self._limit = 0
        self._retry_after = "1"
        self._ips = itertools.count(first_ip)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._pause: str | None = None
        self.reached = threading.Event()
        self._release = threading.Event()

    # -- knobs --------------------------------------------------------------------------

    def rate_limit(self, n: int, retry_after: float = 1.0) -> None:
        self._limit = n
        self._retry_after = f"{retry_after:g}"

    def reset(self) -> None:
        self._limit = 0
        self.boot_s = 0.0
        self.release()

    def pause_at(self, point: str) -> None:
        self.reached.clear()
        self._release.clear()
        self._pause = point

    def release(self) -> None:
        self._pause = None
        self._release.set()

    async def wait_pause(self, point: str) -> None:
        if self._pause != point:
            return
        self.reached.set()
        while not self._release.is_set():
            await asyncio.sleep(0.02)

    def run(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(60)

    # -- to implement -------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> FakeVMAPI:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()),
                                        name=type(self).__name__, daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "fake API did not start"
        return self

    def stop(self) -> None:
        self.release()
        if self._loop is not None and self._stop is not None:
            self.run(self._stop_hosts())
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)

    async def _stop_hosts(self) -> None:
        for h in list(self.hosts.values()):
            await h.stop()

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        import time

        t0 = time.perf_counter()
        try:
            self.calls.append((request.method, request.path))
            if self._limit > 0:
                self._limit -= 1
                self.rate_limited += 1
                return web.json_response({"id": "too_many_requests", "message": "API Rate limit exceeded."},
                                         status=429, headers={"Retry-After": self._retry_after})
            return await handler(request)
        finally:
            self.server_s += time.perf_counter() - t0

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application(middlewares=[self._middleware])
        self.routes(app)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    # -- instances as SSH hosts --------------------------------------------------------

    async def new_host(self, iid: str, public_key: str, gpu: str | None = None) -> FakeSSHHost:
        root = self.root / iid
        root.mkdir(parents=True, exist_ok=True)
        pub = root / "authorized.pub"
        pub.write_text(" ".join(public_key.split()[:2]) + "\n")
        while True:
            ip = f"127.0.0.{next(self._ips)}"
            assert ipaddress.ip_address(ip).is_loopback and not ip.endswith(".255"), "out of addresses"
            h = FakeSSHHost(root, ip, pub, port=self.ssh_port, gpu=gpu or self.gpu)
            try:
                await h.start()
                break
            except OSError:  # that address:port is taken: the next one
                continue
        self.hosts[iid] = h
        self.handed_out.append(ip)
        return h

    async def drop_host(self, iid: str) -> None:
        h = self.hosts.pop(iid, None)
        if h is not None:
            await h.stop()
            shutil.rmtree(h.root, ignore_errors=True)
