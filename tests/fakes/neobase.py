"""The common part of the neocloud fakes (tests/fakes/runpod.py, vultr.py, hotaisle.py):
the loopback server and SSH hosts of tests/fakes/loopback.py (machines running real node
agents), and the knobs every provider's fake shares:

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
import itertools
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.loopback import LoopbackFake, free_port
from tests.fakes.sshhost import FakeSSHHost

POINTS = ("before_create", "after_create", "before_running")


class NeoFake(LoopbackFake):
    provider = "fake"

    def __init__(self, root: Path, *, first_ip: int = 60, key: str = "good-key",
                 shared_ssh_port: bool = True) -> None:
        super().__init__(root, first_ip=first_ip)
        self.thread_name = f"fake-{self.provider}"
        self.shared_ssh_port = shared_ssh_port  # one SSH port for every machine (22 in real life)
        self.keys = {key}
        self.machines: dict[str, dict[str, Any]] = {}  # id -> the provider's own record
        self.creates: list[dict[str, Any]] = []  # every create body, in order
        self.deleted: list[str] = []
        self.no_capacity: set[str] = set()
        self.slow_s = 0.0
        self.boot_s = 0.0
        self.gpu = "mi300x"
        self.rate_limited = 0  # 429s answered
        self.server_s = 0.0  # time spent answering requests (benchmarks)
        self._limit_n = 0
        self._limit_after = "1"
        self._ids = itertools.count(1)

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
        super().pause_at(point)

    def live(self) -> list[dict[str, Any]]:
        return [dict(m) for m in list(self.machines.values())]

    def full(self, *places: str | None) -> bool:
        return "*" in self.no_capacity or any(p in self.no_capacity for p in places if p)

    def next_id(self) -> str:
        return str(next(self._ids))

    # -- lifecycle --------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def start(self) -> NeoFake:
        if self.shared_ssh_port:
            self.ssh_port = free_port()
        self.start_server()
        return self

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._limits])
        self.routes(app)
        return app

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

    # -- machines ---------------------------------------------------------------------

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
        return await self.add_host(mid, self.root / f"{self.provider}-{mid}", public_key,
                                   port=self.ssh_port if self.shared_ssh_port else 0, gpu=self.gpu)

    async def halt(self, mid: str) -> None:
        h = self.hosts.get(mid)
        if h is not None:
            await h.stop()

    async def remove(self, mid: str) -> None:
        self.machines.pop(mid, None)
        self.deleted.append(mid)
        await self.drop_host(mid)
