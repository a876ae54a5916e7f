"""The common part of the neocloud fakes (tests/fakes/runpod.py, vultr.py, hotaisle.py):
an aiohttp server on 127.0.0.1 in a thread of its own (it outlives daemons the tests kill),
machines that are fake SSH hosts (tests/fakes/sshhost.py) on loopback addresses 127.0.0.x
running real node agents, and the knobs every provider's fake shares:

- ``keys``: the API keys accepted (any other is refused the provider's way);
- ``no_capacity``: regions/zones (or ``"*"``) where a create is refused for capacity;
- ``rate_limit(n, retry_after)``: the next ``n`` requests answer 429 with ``Retry-After``;
- ``slow_s``: every create waits this long before answering (a slow operation);
  ``boot_s``: a machine stays pending this long before it runs;
- ``gpu``: the GPU profile of new machines (``mi300x``, ``mi355x``, ``none``);
- ``pause_at(point)`` (before_create, after_create, before_running) with ``reached`` /
  ``release()``.

``live()`` lists the machines that exist (the tests assert it is empty after failures).
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.sshhost import FakeSSHHost

POINTS = ("before_create", "after_create", "before_running")


class NeoFake:
    provider = "fake"

    def __init__(self, root: Path, *, first_ip: int = 60, key: str = "good-key",
                 shared_ssh_port: bool = True) -> None:
        self.root = root
        self.port = 0
        self.ssh_port = 0  # shared by every machine when shared_ssh_port (22 in real life)
        self.shared_ssh_port = shared_ssh_port
        self.keys = {key}
        self.machines: dict[str, dict[str, Any]] = {}  # id -> the provider's own record
        self.hosts: dict[str, FakeSSHHost] = {}  # id -> its SSH host
        self.creates: list[dict[str, Any]] = []  # every create body, in order
        self.deleted: list[str] = []
        self.no_capacity: set[str] = set()
        self.slow_s = 0.0
        self.boot_s = 0.0
        self.gpu = "mi300x"
        self.handed_out: list[str] = []
        self.rate_limited = 0  # 429s answered
        self.server_s = 0.0  # time spent answering requests (benchmarks)
        self._limit_n = 0
        self._limit_after = "1"
        self._ips = itertools.count(first_ip)
        self._ids = itertools.count(1)
        self._pause: str | None = None
        self.reached = threading.Event()
        self._release = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # -- knobs ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rate_limit(self, n: int, retry_after: str = "1") -> None:
        self._limit_n, self._limit_after = n, retry_after

    def clear(self) -> None:
        self.no_capacity.clear()
        self._limit_n = 0
        self.slow_s = self.boot_s = 0.0
        self.gpu = "mi300x"

    def pause_at(self, point: str) -> None:
        assert point in POINTS, point
        self.reached.clear()
        self._release.clear()
        self._pause = point

    def release(self) -> None:
        self._pause = None
        self._release.set()

    def live(self) -> list[dict[str, Any]]:
        return [dict(m) for m in list(self.machines.values())]

    def full(self, *places: str | None) -> bool:
        return "*" in self.no_capacity or any(p in self.no_capacity for p in places if p)

    def next_id(self) -> str:
        return str(next(self._ids))

    def run(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(60)

    # -- lifecycle --------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def start(self) -> NeoFake:
        if self.shared_ssh_port:
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.ssh_port = int(s.getsockname()[1])
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()),
                                        name=f"fake-{self.provider}", daemon=True)
        self._thread.start()
        assert self._ready.wait(10), f"fake {self.provider} did not start"
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
    async def _limits(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self._limit_n > 0:
            self._limit_n -= 1
            self.rate_limited += 1
            return web.json_response({"error": "rate limited"}, status=429,
                                     headers={"Retry-After": self._limit_after})
        t0 = time.perf_counter()
        try:
            return await handler(request)  # type: ignore[no-any-return]
        finally:
            self.server_s += time.perf_counter() - t0

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application(middlewares=[self._limits])
        self.routes(app)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    # -- machines ---------------------------------------------------------------------

    async def wait_pause(self, point: str) -> None:
        if self._pause != point:
            return
        self.reached.set()
        while not self._release.is_set():
            await asyncio.sleep(0.02)

    async def boot(self, mid: str, public_key: str, on_up: Any) -> None:
        """Start machine ``mid``'s SSH host (after ``boot_s`` and the before_running pause),
        then call ``on_up(host)`` unless it was deleted meanwhile."""
        await asyncio.sleep(self.boot_s)
        await self.wait_pause("before_running")
        if mid not in self.machines:
            return
        h = self.hosts.get(mid)
        if h is None:
            h = await self._new_host(mid, public_key)
        else:
            await h.start()
        if mid not in self.machines:
            await h.stop()
            return
        on_up(h)

    async def _new_host(self, mid: str, public_key: str) -> FakeSSHHost:
        root = self.root / f"{self.provider}-{mid}"
        root.mkdir(parents=True, exist_ok=True)
        pub = root / "authorized.pub"
        pub.write_text(" ".join(public_key.split()[:2]) + "\n")
        while True:
            ip = f"127.0.0.{next(self._ips)}"
            assert ipaddress.ip_address(ip).is_loopback and not ip.endswith(".255"), "out of addresses"
            h = FakeSSHHost(root, ip, pub, port=self.ssh_port if self.shared_ssh_port else 0,
                            gpu=self.gpu)
            try:
                await h.start()
                break
            except OSError:
                continue
        self.hosts[mid] = h
        self.handed_out.append(ip)
        return h

    async def halt(self, mid: str) -> None:
        h = self.hosts.get(mid)
        if h is not None:
            await h.stop()

    async def remove(self, mid: str) -> None:
        self.machines.pop(mid, None)
        self.deleted.append(mid)
        h = self.hosts.pop(mid, None)
        if h is not None:
            await h.stop()
            shutil.rmtree(h.root, ignore_errors=True)
