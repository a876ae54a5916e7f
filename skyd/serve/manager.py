"""The serving service inside the daemon: services up and down, one controller task per
service, resumed at daemon start from SQLite."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from skyd import settings
from skyd.daemon.owners import acting_as
from skyd.errors import InvalidSpecError, NotFoundError
from skyd.serve import status as st
from skyd.serve.controller import ServiceController
from skyd.serve.state import ServeDB

Spawn = Callable[..., Any]
_current: list[ServeManager] = []


def current_manager() -> ServeManager:
    if not _current:
        raise RuntimeError("serving is not running")
    return _current[0]


class ServeManager:
    def __init__(self, store: Any, ops: Any, spawn: Spawn, *, log_dir: Path,
                 publish: Callable[[str, Any], None] | None = None) -> None:
        self.db = ServeDB(store)
        self.store = store
        self.ops = ops
        self.spawn = spawn
        self.log_dir = log_dir
        self._publish = publish
        self.host = settings.SERVE_HOST.get()
        self.qps_window = settings.SERVE_QPS_WINDOW.get()
        self.controllers: dict[str, ServiceController] = {}
        _current[:] = [self]

    # -- plumbing used by controllers -------------------------------------------------
    def log(self, service: str, text: str) -> None:
        from skyd.jobs.logfile import CONTROLLER_LOG

        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        CONTROLLER_LOG.append(self.log_path(service), f"{stamp} {text}\n")

    def log_path(self, service: str) -> Path:
        return self.log_dir / f"{service}.log"

    def access_log_path(self, service: str) -> Path:
        return self.log_dir / f"{service}.access.log"

    def publish(self, service: str) -> None:
        if self._publish is not None:
            self._publish("serve", {"service": service})

    @staticmethod
    def is_local(task: dict[str, Any]) -> bool:
        """The replica may land on `local` (no resources name another cloud): it gets a
        port of its own on this machine."""
        return all((r.get("cloud") or "local") == "local" for r in task.get("resources") or [{}])

    @staticmethod
    def replica_port(spec: dict[str, Any]) -> int:
        port = spec["service"].get("ports")
        if port:
            return int(port)
        for r in spec["task"].get("resources") or []:
            for p in r.get("ports") or []:
                return int(str(p).split("-")[0])
        return 8080

    async def replica_host(self, cluster: str) -> str:
        from skyd.pipeline import clusters_db as cdb

        row = await cdb.get_cluster(self.store, cluster)
        handle = cdb.handle_of(row) if row else None
        if handle is None:
            return "127.0.0.1"
        return handle.head.external_ip or handle.head.internal_ip or "127.0.0.1"

    def ssl_context(self, tls: dict[str, Any] | None) -> ssl.SSLContext | None:
        if not tls:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(tls["certfile"], tls["keyfile"])
        return ctx

    # -- controllers ------------------------------------------------------------------
    def _start(self, name: str, user: str | None = None) -> ServiceController:
        """The service's controller (started when none runs): it acts as ``user``, the
        service's owner, whoever asked (an admin's update or down, a restarted daemon)."""
        c = self.controllers.get(name)
        if c is None:
            c = ServiceController(self, name)
            self.controllers[name] = c
            with acting_as(user):  # its replicas' clusters stay its owner's
                self.spawn(f"service-{name}", c.run)
        return c

    def forget(self, name: str, c: ServiceController) -> None:
        if self.controllers.get(name) is c:
            del self.controllers[name]

    async def resume_all(self, timeout: float = 10.0) -> None:
        """Restart every service's controller and wait (up to ``timeout``) until each load
        balancer listens again: the daemon answers its API only after this, so a service
        its status shows READY takes requests."""
        started = []
        for svc in await self.db.services():
            self.log(svc["name"], "controller resumed after a daemon start")
            started.append(self._start(svc["name"], svc.get("user")))
        with anyio.move_on_after(timeout):
            for c in started:
                await c.listening.wait()

    async def stop(self, timeout: float = 10.0) -> None:
        """Daemon shutdown: stop the controllers (rows stay: the next daemon resumes)."""
        cs = list(self.controllers.values())
        for c in cs:
            c.cancel_scope.cancel()
        with anyio.move_on_after(timeout):
            for c in cs:
                await c.done.wait()

    # -- verbs ------------------------------------------------------------------------
    async def up(self, name: str, spec: dict[str, Any], lb_port: int) -> dict[str, Any]:
        scheme = "https" if spec["service"].get("tls") else "http"
        endpoint = f"{scheme}://{self.host}:{lb_port}"
        if not await self.db.create_service(name, spec, lb_port, endpoint):
            raise InvalidSpecError(f"a service named {name!r} exists", field="name",
                                   hint=f"`skyd serve update {name} TASK.yaml`, or pick another -n")
        self.log(name, f"service created: endpoint {endpoint}")
        self._start(name)
        return {"name": name, "endpoint": endpoint}

    async def update(self, name: str, spec: dict[str, Any], mode: str) -> int:
        """A new version: its replicas launch, the old ones go as the mode says."""
        svc = await self.db.get_service(name)
        if svc is None or svc["status"] == st.SHUTTING_DOWN:
            raise NotFoundError(f"no service {name!r}", hint="see `skyd serve status`")
        old = svc["spec"]["service"]
        if bool(old.get("tls")) != bool(spec["service"].get("tls")) or (
                old.get("ports") != spec["service"].get("ports")):
            raise InvalidSpecError("an update cannot change service.ports or tls",
                                   field="service", hint="bring a new service up instead")
        version = await self.db.update_spec(name, {**spec, "update_mode": mode})
        self.log(name, f"update to version {version} ({mode})")
        self._start(name, svc.get("user")).poke()
        return version

    async def down(self, names: list[str], *, all_services: bool = False,
                   wait: bool = True) -> list[str]:
        rows = await self.db.services()
        have = {r["name"] for r in rows}
        owner = {r["name"]: r.get("user") for r in rows}
        if all_services:
            names = sorted(have)
        missing = [n for n in names if n not in have]
        if missing:
            raise NotFoundError(f"no service {', '.join(missing)}", hint="see `skyd serve status`")
        for n in names:
            await self.db.set_service_status(n, st.SHUTTING_DOWN)
            self.log(n, "shutting down")
            self._start(n, owner.get(n)).poke()
        if wait:
            for n in names:
                c = self.controllers.get(n)
                if c is not None:
                    await c.done.wait()
        return names
