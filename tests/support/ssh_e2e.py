"""Helpers for the SSH end-to-end tests (no tests in here): fake hosts in the test's event
loop, the daemon as a real subprocess, the real ``skyd`` CLI run without blocking the loop."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from tests.support.daemon import SKYD_BIN, DaemonProc

PLUGIN = "skyd.pipeline.ssh_warmup"


def daemon_env(**extra: str) -> dict[str, str]:
    env = {"SKYD_EXTRA_PLUGINS": PLUGIN, "SKYD_REFRESH_S": "3600"}
    env.update(extra)
    return env


@asynccontextmanager
async def daemon(**env: str) -> AsyncIterator[DaemonProc]:
    """The daemon as a subprocess; started and stopped from a thread so the fake hosts in
    this event loop keep answering meanwhile."""
    d = DaemonProc(**daemon_env(**env))
    await anyio.to_thread.run_sync(d.start)
    try:
        yield d
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(d.terminate)
            finally:
                d.cleanup()


class Result:
    def __init__(self, rc: int, out: str, err: str) -> None:
        self.returncode, self.stdout, self.stderr = rc, out, err

    def __repr__(self) -> str:
        return f"rc={self.returncode}\n--stdout--\n{self.stdout}\n--stderr--\n{self.stderr}"

    def json(self) -> Any:
        return json.loads(self.stdout)


async def cli(*args: str, timeout: float = 90.0) -> Result:
    """Run the real ``skyd`` console script without blocking the loop."""
    from tests.support import forkserver

    env = dict(os.environ)
    try:
        p = await anyio.to_thread.run_sync(
            lambda: forkserver.run([str(SKYD_BIN), *args], env, timeout=timeout))
    except subprocess.TimeoutExpired as e:
        raise TimeoutError(f"skyd {' '.join(args)}: no exit in {timeout} s") from e
    return Result(p.returncode, p.stdout, p.stderr)


def cluster_row(rows: Any, name: str) -> dict[str, Any]:
    rows = rows["clusters"] if isinstance(rows, dict) and "clusters" in rows else rows
    return next(r for r in rows if r["name"] == name)


def node_dirs(host_home: Path) -> list[Path]:
    nodes = host_home / ".skyd" / "nodes"
    return sorted(nodes.iterdir()) if nodes.exists() else []
