"""What the fake cloud APIs in tests/fakes share (gce.py, neobase.py, vmapi.py): an aiohttp
app on 127.0.0.1 served from an event loop in a thread of its own (so it outlives daemons the
tests kill), the pause points a test holds a create at (``pause_at`` / ``reached`` /
``release``), and machines that are fake SSH hosts (tests/fakes/sshhost.py) on loopback
addresses 127.0.0.x, handed out in order from ``first_ip``."""

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


class LoopbackFake:
    thread_name = "fake"

    def __init__(self, root: Path, *, first_ip: int) -> None:
        self.root = root
        self.port = 0
        self.ssh_port = 0
        self.hosts: dict[str, FakeSSHHost] = {}  # machine key -> its SSH host
        self.handed_out: list[str] = []  # every machine address given out
        self._ips = itertools.count(first_ip)
        self._pause: str | None = None
        self.reached = threading.Event()
        self._release = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def make_app(self) -> web.Application:
        raise NotImplementedError

    # -- pause points (from the test's thread) ---------------------------------------------

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
        """Run ``coro`` on the fake's loop, from the test's thread."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(60)

    # -- lifecycle ---------------------------------------------------------------------------

    def start_server(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()),
                                        name=self.thread_name, daemon=True)
        self._thread.start()
        assert self._ready.wait(10), f"{self.thread_name} did not start"

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

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runner = web.AppRunner(self.make_app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    # -- machines as SSH hosts ---------------------------------------------------------------

    async def add_host(self, key: str, root: Path, public_key: str, *, port: int,
                       gpu: str | dict[str, Path] = "none") -> FakeSSHHost:
        """Start an SSH host for machine ``key`` on the next free loopback address, accepting
        ``public_key`` (an OpenSSH public key line)."""
        root.mkdir(parents=True, exist_ok=True)
        pub = root / "authorized.pub"
        pub.write_text(" ".join(public_key.split()[:2]) + "\n")
        while True:
            ip = f"127.0.0.{next(self._ips)}"
            assert ipaddress.ip_address(ip).is_loopback and not ip.endswith(".255"), "out of addresses"
            h = FakeSSHHost(root, ip, pub, port=port, gpu=gpu)
            try:
                await h.start()
                break
            except OSError:  # that address:port is taken: the next one
                continue
        self.hosts[key] = h
        self.handed_out.append(ip)
        return h

    async def drop_host(self, key: str) -> None:
        h = self.hosts.pop(key, None)
        if h is not None:
            await h.stop()
            shutil.rmtree(h.root, ignore_errors=True)
