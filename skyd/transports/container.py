"""A container is a transport over a transport (docs/containers.md).

``ContainerTransport(inner, spec)`` runs every command as ``docker|podman exec -i CTR ...``
through the node's own transport (local, ssh, relay), so the node agent that
``agent_deploy`` starts over it runs INSIDE the task's container: GPU detection, jobs, logs
and autostop work there unchanged. The container shares the node's network and PID
namespace (the agent's port and pids mean the same on the node), and the node dir, the jobs'
HOME and every file-mount destination are bound at the same paths, so:

- ``agent_endpoint`` is the inner transport's (a port on the node's loopback, or the agent's
  Unix socket in the bound node dir);
- files under a bound path are copied by the inner transport directly; elsewhere they go
  through a staging file in the node dir and a ``mv``/``cp`` inside the container.
"""

from __future__ import annotations

import posixpath
import secrets
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyd import settings
from skyd.transports import container_runtime as rt
from skyd.transports.base import AgentAddress, CommandError, RunResult, Transport, command_line

__all__ = ["ContainerTransport", "wrap"]

#: how docker/podman exec say the container is not running (podman exits 255, docker 1)
_NOT_RUNNING = ("is not running", "container state improper", "only create exec sessions on running")


class ContainerTransport(Transport):
    python = "python3"

    def __init__(self, inner: Transport, spec: rt.ContainerSpec) -> None:
        self.inner = inner
        self.spec = spec
        # a bound directory where files bound for unbound paths wait (the node dir)
        self.staging = spec.stage_dir or (spec.binds[0][0] if spec.binds else "/tmp")  # noqa: S108

    def __str__(self) -> str:
        return f"{self.inner} [container {self.spec.name}]"

    def _exec(self, command: str) -> list[str]:
        return [*self.spec.runtime, "exec", "-i", self.spec.name, "/bin/sh", "-c", command]

    async def run(
        self,
        cmd: str | Sequence[str],
        *,
        input: str | bytes | None = None,
        check: bool = False,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        idempotent: bool = False,
    ) -> RunResult:
        command = command_line(cmd, env)
        res = await self.inner.run(self._exec(command), input=input, timeout=timeout, idempotent=idempotent)
        if not res.ok and any(s in res.stderr.lower() for s in _NOT_RUNNING):
            # The node rebooted or someone stopped it: start it again once, then retry.
            if await rt.state(self.inner, self.spec) not in ("", "running"):
                if self.spec.shared:
                    await rt.share_binds(self.inner, self.spec)
                await self.inner.run([*self.spec.runtime, "start", self.spec.name], timeout=120)
                res = await self.inner.run(self._exec(command), input=input, timeout=timeout,
                                           idempotent=idempotent)
        if check and not res.ok:
            raise CommandError(self, command, res)
        return res

    def _bound(self, path: str) -> str | None:
        """The node path of a container path under a bind, or None."""
        p = posixpath.normpath(path)
        for src, dst in self.spec.binds:
            d = posixpath.normpath(dst)
            if p == d or p.startswith(d.rstrip("/") + "/"):
                return posixpath.join(src, posixpath.relpath(p, d)) if p != d else src
        return None

    def _stage(self) -> str:
        return posixpath.join(self.staging, f".stage-{secrets.token_hex(6)}")

    async def put(self, local: str | Path, remote: str) -> None:
        host = self._bound(remote)
        if host is not None:
            await self.inner.put(local, host)
            return
        tmp = self._stage()
        await self.inner.put(local, tmp)
        q = shlex.quote
        await self.run(f"mkdir -p {q(posixpath.dirname(remote) or '/')} && mv -f {q(tmp)} {q(remote)}",
                       check=True)

    async def get(self, remote: str, local: str | Path) -> None:
        host = self._bound(remote)
        if host is not None:
            await self.inner.get(host, local)
            return
        tmp = self._stage()
        await self.run(f"cp {shlex.quote(remote)} {shlex.quote(tmp)}", check=True)
        try:
            await self.inner.get(tmp, local)
        finally:
            await self.inner.run(["rm", "-f", tmp])

    async def write_file(self, remote: str, data: bytes, *, mode: int = 0o600) -> None:
        host = self._bound(remote)
        if host is not None:
            await self.inner.write_file(host, data, mode=mode)
            return
        tmp = self._stage()
        await self.inner.write_file(tmp, data, mode=mode)
        q = shlex.quote
        await self.run(f"mkdir -p {q(posixpath.dirname(remote) or '/')} && mv -f {q(tmp)} {q(remote)}",
                       check=True)

    async def agent_endpoint(self, addr: AgentAddress) -> tuple[str, int]:
        # Host network + the node dir bound at its path: the agent is where it would be.
        return await self.inner.agent_endpoint(addr)

    async def close(self) -> None:
        """The inner transport belongs to the provider: it closes it."""


def wrap(inner: Transport, extra: dict[str, Any] | None) -> Transport:
    """``inner`` wrapped in the node's container when the node handle records one."""
    d = (extra or {}).get("container")
    if not d:
        return inner
    return ContainerTransport(inner, rt.ContainerSpec.from_dict(d))


async def prepare(t: Transport, extra: dict[str, Any], *, rank: int, node_dir: str, home: str,
                  log: Any, request: rt.ContainerRequest | None = None,
                  resolve: Any = None, label: str = "") -> Transport:
    """The transport to start a node's agent over: ``t`` itself, or, for a node with a
    container (recorded in ``extra['container']``, or asked for by ``request``), the
    running container (found again, started again, or made) wrapped around ``t``."""

    if request is not None and not extra.get("container"):
        spec = request.spec(rank=rank, node_dir=node_dir, home=home, resolve=resolve)
        extra["container"] = spec.to_dict()
    d = extra.get("container")
    if not d:
        return t
    spec = rt.ContainerSpec.from_dict(d)
    await rt.ensure(t, spec, log, creds=request.login if request is not None else None,
                    want=settings.CONTAINER_RUNTIME.get(), label=label or f"node {rank}")
    extra["container"] = spec.to_dict()
    return ContainerTransport(t, spec)


async def node_op(t: Transport, extra: dict[str, Any] | None, op: str) -> None:
    """``stop`` or ``remove`` the node's container, if it has one (over the node's own
    transport)."""
    d = (extra or {}).get("container")
    if not d:
        return
    spec = rt.ContainerSpec.from_dict(d)
    await (rt.stop(t, spec) if op == "stop" else rt.remove(t, spec))
