"""The protocol every transport implements (see docs/transports.md).

A transport is how the daemon reaches one node: run a command there, copy files to and from
it, and reach the node agent's gRPC port as a byte stream. How that stream is carried (a
plain local port, an SSH port forward, an exec relay to the agent's Unix socket, a
Kubernetes port-forward) is the transport's business: callers get a local (host, port) that
grpclib connects to, one byte stream per accepted connection.

Providers build their nodes' transports; ``skyd.transports.agent_deploy`` deploys, starts,
health-checks, upgrades and stops the node agent over any of them.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from skyd.errors import SkydError

__all__ = ["AgentAddress", "CommandError", "NodeShell", "RunResult", "Transport"]


@dataclass
class RunResult:
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class CommandError(SkydError):
    """A command run with ``check=True`` exited non-zero."""

    def __init__(self, where: object, command: str, result: RunResult) -> None:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        super().__init__(
            f"command on {where} exited {result.exit_status}: {command[:120]}"
            + ("\n  " + "\n  ".join(tail) if tail else "")
        )
        self.result = result


@dataclass(frozen=True)
class AgentAddress:
    """Where the node agent listens, as seen on the node: a TCP (host, port) and, for
    transports that cannot forward TCP, its Unix socket (``socket``; None on old agents)."""

    host: str
    port: int
    socket: str | None = None


def command_line(cmd: str | Sequence[str], env: dict[str, str] | None = None) -> str:
    """A shell command line: a string as is, an argv list shlex-quoted; ``env`` exported."""
    command = cmd if isinstance(cmd, str) else shlex.join(cmd)
    if env:
        command = " ".join(f"export {k}={shlex.quote(v)};" for k, v in env.items()) + " " + command
    return command


class Transport(ABC):
    """One node. Every method is async and safe to call concurrently."""

    #: the interpreter that runs skyd's helper scripts on the node (Python >= 3.8)
    python: str = "python3"

    @abstractmethod
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
        """Run a command on the node (a shell string, or an argv list that gets quoted).
        ``idempotent``: safe to run again if the connection drops while it runs.
        ``check``: raise CommandError on a non-zero exit."""

    @abstractmethod
    async def put(self, local: str | Path, remote: str) -> None:
        """Copy a local file to ``remote`` on the node; readers never see a partial file."""

    @abstractmethod
    async def get(self, remote: str, local: str | Path) -> None:
        """Copy a file from the node to ``local``."""

    @abstractmethod
    async def write_file(self, remote: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write ``data`` atomically with permissions ``mode`` from creation (secrets)."""

    @abstractmethod
    async def agent_endpoint(self, addr: AgentAddress) -> tuple[str, int]:
        """A local (host, port) whose every connection is a byte stream to the agent at
        ``addr``. Re-calling returns the same endpoint while it works."""

    async def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections, listeners and forwards."""


@dataclass(frozen=True)
class NodeShell:
    """A node as node-side setup (bucket mounts) sees it: its transport, skyd's directory
    there (0700-able, for 0600 config files and caches) and ``path``, which turns a task's
    destination (``~/x``, ``/x``, ``x``) into the absolute path on the node."""

    transport: Transport
    skyd_dir: str
    home: str  # the jobs' HOME on the node (where ``~/x`` lands)
    root: str = ""  # where absolute destinations land ("" = the node's /)
    label: str = ""  # how messages name the node
    resolve: object = None  # a provider's own dst -> path mapping (sandboxes), if any

    def path(self, dst: str) -> str:
        import posixpath

        if callable(self.resolve):
            return str(self.resolve(dst))

        if dst == "~" or dst.startswith("~/"):
            return posixpath.normpath(posixpath.join(self.home, dst[2:]))
        if dst.startswith("/"):
            return posixpath.normpath(self.root + dst) if self.root else posixpath.normpath(dst)
        return posixpath.normpath(posixpath.join(self.home, dst))

