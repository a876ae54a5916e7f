"""The common part of the fake VM-provider APIs (tests/fakes/doapi.py, crusoeapi.py): the
loopback server and SSH hosts of tests/fakes/loopback.py, rate limiting with Retry-After, and
every instance's SSH host on one SSH port.

Knobs shared by every fake: ``rate_limit(n, retry_after)`` (the next ``n`` requests get 429
with that Retry-After), ``boot_s`` (how long a new instance takes to run: a slow operation),
``pause_at("before_running")`` with ``reached`` / ``release()`` (a new instance waits there,
made but not running, e.g. while a test kills the daemon).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.loopback import LoopbackFake, free_port
from tests.fakes.sshhost import FakeSSHHost

__all__ = ["FakeVMAPI", "free_port"]


class FakeVMAPI(LoopbackFake):
    def __init__(self, root: Path, *, first_ip: int, ssh_port: int = 0, gpu: str = "mi300x") -> None:
        super().__init__(root, first_ip=first_ip)
        self.thread_name = type(self).__name__
        self.ssh_port = ssh_port or free_port()
        self.gpu = gpu
        self.boot_s = 0.0
        self.calls: list[tuple[str, str]] = []
        self.rate_limited = 0  # 429s answered
        self.server_s = 0.0
        self._limit = 0
        self._retry_after = "1"

    # -- knobs --------------------------------------------------------------------------

    def rate_limit(self, n: int, retry_after: float = 1.0) -> None:
        self._limit = n
        self._retry_after = f"{retry_after:g}"

    def reset(self) -> None:
        self._limit = 0
        self.boot_s = 0.0
        self.release()

    # -- to implement -------------------------------------------------------------------

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> FakeVMAPI:
        self.start_server()
        return self

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        self.routes(app)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        t0 = time.perf_counter()
        try:
            self.calls.append((request.method, request.path))
            if self._limit > 0:
                self._limit -= 1
                self.rate_limited += 1
                return web.json_response({"id": "too_many_requests", "message": "API Rate limit exceeded."},
                                         status=429, headers={"Retry-After": self._retry_after})
            return await handler(request)  # type: ignore[no-any-return]
        finally:
            self.server_s += time.perf_counter() - t0

    # -- instances as SSH hosts --------------------------------------------------------

    async def new_host(self, iid: str, public_key: str,
                       gpu: str | dict[str, Path] | None = None) -> FakeSSHHost:
        return await self.add_host(iid, self.root / iid, public_key, port=self.ssh_port,
                                   gpu=gpu or self.gpu)
