"""Helpers for the node agent tests: real agent processes on 127.0.0.1 (no tests here)."""

# ruff: noqa: UP031

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from skyd.nodeagent.client import AgentClient, start_agent_detached_blocking
from skyd.nodeagent.jobqueue import TERMINAL

FAST = ["--tick", "0.2", "--heartbeat-interval", "0.5"]
_ZYGOTE: list[Any] = []  # this test process's warm agent helper, made on first use


def _zygote() -> Any:
    """Agents fork from one warm helper per test process, as a daemon's `local` agents do
    (skyd/nodeagent/zygote.py; ~0.03 against ~0.2 CPU-s for a fresh interpreter). What
    cannot fork (another interpreter, a zipapp) starts fresh, as in the daemon."""
    if not _ZYGOTE:
        import atexit

        from skyd.nodeagent.zygote import AgentZygote

        _ZYGOTE.append(AgentZygote())
        atexit.register(_ZYGOTE[0].close)
    return _ZYGOTE[0]


@dataclass
class Agent:
    home: Path
    token: str
    info: dict[str, Any]
    kw: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return "127.0.0.1:%d" % self.info["port"]

    def client(self, token: str | None = None) -> AgentClient:
        return AgentClient("127.0.0.1", self.info["port"], self.token if token is None else token)

    def kill9(self) -> None:
        try:
            os.kill(self.info["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
        wait_gone(self.info["pid"])

    def job_pgids(self) -> list[int]:
        db = self.home / "jobs.db"
        if not db.exists():
            return []
        with sqlite3.connect(str(db)) as con:
            return [r[0] for r in con.execute("SELECT pid FROM ranks WHERE pid IS NOT NULL")]


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    os.waitpid(pid, os.WNOHANG)  # our child (started by this process)
                    return True
        except (OSError, ChildProcessError):
            return True
        time.sleep(0.02)
    return False


class AgentFactory:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.token_file = root / "cluster.token"
        self.token_file.write_text("secret-token-123")
        self.agents: list[Agent] = []

    def start(self, name: str = "node0", *, rank: int = 0, args: list[str] | None = None,
              **kw: Any) -> Agent:  # fmt: skip
        home = self.root / name
        extra = FAST + (args or [])
        if not ({"python", "zipapp", "env"} & kw.keys()):
            kw = {**kw, "zygote": _zygote()}
        info = start_agent_detached_blocking(home, token_file=self.token_file, rank=rank,
                                             cluster="c1", extra_args=extra, **kw)  # fmt: skip
        agent = Agent(home, "secret-token-123", info, dict(rank=rank, args=args, **kw))
        self.agents.append(agent)
        return agent

    def restart(self, agent: Agent) -> Agent:
        name = agent.home.name
        return self.start(name, **agent.kw)

    def cleanup(self) -> None:
        for a in self.agents:
            a.kill9()
            for pgid in a.job_pgids():
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[AgentFactory]:
    f = AgentFactory(tmp_path)
    yield f
    f.cleanup()


async def wait_status(c: AgentClient, job_id: int, want: set[str] | str,
                      timeout: float = 15.0) -> dict[str, Any]:  # fmt: skip
    want = {want} if isinstance(want, str) else want
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = (await c.job_queue(job_ids=[job_id]))[0]
        if job["status"] in want:
            return job
        if job["status"] in TERMINAL:
            break
        await asyncio.sleep(0.05)
    raise AssertionError("job %d is %s, wanted %s" % (job_id, job.get("status"), want))


async def read_log(c: AgentClient, job_id: int, **kw: Any) -> str:
    out = b""
    async for chunk in c.tail_logs(job_id, **kw):
        out += chunk
    return out.decode()


def pid_alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
