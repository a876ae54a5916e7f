"""The transport for nodes on this machine (``local`` sandboxes).

Commands run as subprocesses (``/bin/sh -c``) in the node dir, files are copied with the
filesystem, and the agent's byte stream is its own port on the node's loopback address
(skyd.clouds.local_net): no relay is needed. Jobs run in the node's mount namespace
(skyd.transports.sandbox_ns); the transport's own commands (syncs, mounts) run on the host.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from skyd.transports.base import AgentAddress, CommandError, RunResult, Transport, command_line

__all__ = ["LocalTransport"]


class LocalTransport(Transport):
    """A node whose files are under ``node_dir`` on this machine."""

    python = sys.executable

    def __init__(self, node_dir: str | Path) -> None:
        self.node_dir = Path(node_dir)

    def __str__(self) -> str:
        return f"local:{self.node_dir}"

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
        data = input.encode() if isinstance(input, str) else input
        cwd = self.node_dir if self.node_dir.is_dir() else None
        with anyio.fail_after(timeout) if timeout else anyio.CancelScope():
            p = await anyio.run_process(["/bin/sh", "-c", command], input=data, check=False, cwd=cwd)
        res = RunResult(p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"))
        if check and not res.ok:
            raise CommandError(self, command, res)
        return res

    async def put(self, local: str | Path, remote: str) -> None:
        def copy() -> None:
            dst = Path(remote)
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(f"{dst.name}.part-{os.getpid()}")
            shutil.copy2(local, tmp)
            os.replace(tmp, dst)

        await anyio.to_thread.run_sync(copy)

    async def get(self, remote: str, local: str | Path) -> None:
        await anyio.to_thread.run_sync(shutil.copy2, remote, local)

    async def write_file(self, remote: str, data: bytes, *, mode: int = 0o600) -> None:
        def write() -> None:
            dst = Path(remote)
            tmp = dst.with_name(f"{dst.name}.tmp-{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, dst)

        await anyio.to_thread.run_sync(write)

    async def agent_endpoint(self, addr: AgentAddress) -> tuple[str, int]:
        return addr.host or "127.0.0.1", int(addr.port)
