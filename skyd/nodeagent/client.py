"""Async client of the node agent (used by the daemon, and by head agents to reach workers),
and `start_agent_detached` to launch an agent process. Only grpclib/betterproto + stdlib;
Python 3.8 compatible because the head agent uses it too.

The channel is mutual TLS (auth.py): the agent must present a certificate of the cluster's
CA before anything is sent, and the client presents one too. Errors: RPC failures raise
grpclib.exceptions.GRPCError (NOT_FOUND for an unknown job, INVALID_ARGUMENT /
FAILED_PRECONDITION for a bad spec); an unreachable agent raises OSError
(ConnectionRefusedError), an endpoint that is not this cluster's agent ssl.SSLError (an
OSError too), and one that does not answer asyncio.TimeoutError.
"""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl as _ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

from grpclib.client import Channel
from grpclib.config import Configuration
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import StreamTerminatedError

from ..proto import skyd_agent as pb
from .auth import SERVER_NAME
from .spec import SpecLike, job_from_proto, spec_to_proto

_REPO_ROOT = str(Path(__file__).resolve().parents[2])
#: a followed log stream's deadline. betterproto reads ``timeout=None`` as "the stub's
#: default" (30 s), which ended every follow of a job silent for 30 s; 365 days is no
#: deadline in practice (grpclib sends it as hours).
STREAM_TIMEOUT_S = 365 * 24 * 3600.0


class AgentClient:
    """`async with AgentClient(host, port, secret) as c: await c.submit_job({...})`.

    ``secret`` is the cluster secret (the daemon's side: the TLS client context is derived
    from it, see credentials.py); an agent reaching its workers passes its own ``ssl``
    context instead. `AgentClient(path="/x/agent.sock", ...)` connects over a Unix socket."""

    def __init__(self, host: str | None = None, port: int | None = None, token: str = "",
                 *, path: str | None = None, timeout: float = 30.0,
                 ssl: _ssl.SSLContext | None = None) -> None:  # fmt: skip
        if ssl is None:
            from .credentials import client_ssl  # daemon only (needs cryptography)

            ssl = client_ssl(token)
        # The connection's window well above a stream's (4 MiB): a borrowed channel is
        # shared (skyd.pipeline.agents), and a log stream nobody reads must not take the
        # whole window and stall the calls beside it.
        config = Configuration(ssl_target_name_override=SERVER_NAME,
                               http2_connection_window_size=2 ** 31 - 1)
        if path:
            # An explicit codec: left to choose, grpclib imports googleapis' status protos
            # (~25 ms) for error details no agent sends.
            self._channel = Channel(path=path, ssl=ssl, config=config, codec=ProtoCodec())
        else:
            self._channel = Channel(host or "127.0.0.1", int(port or 0), ssl=ssl, config=config,
                                    codec=ProtoCodec())
        self._stub = pb.NodeAgentStub(self._channel, timeout=timeout)

    async def __aenter__(self) -> AgentClient:
        self._task = asyncio.current_task()
        self._cancels = self._task.cancelling() if self._task is not None else 0
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close()
        self._take_back_stray_cancels(getattr(self, "_task", None), getattr(self, "_cancels", 0),
                                      exc_type)

    @contextlib.asynccontextmanager
    async def borrowed(self) -> AsyncIterator[AgentClient]:
        """``async with c.borrowed():`` a block of the current task on a channel others share
        (skyd.pipeline.agents pools them): what ``async with c`` does for its block but
        close the channel; any number of tasks may be in such blocks at once."""
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        try:
            yield self
        except BaseException as e:
            self._take_back_stray_cancels(task, cancels, type(e))
            raise
        self._take_back_stray_cancels(task, cancels, None)

    @staticmethod
    def _take_back_stray_cancels(task: asyncio.Task[Any] | None, cancels: int,
                                 exc_type: type[BaseException] | None) -> None:
        """grpclib wakes a call whose connection was lost with a native ``Task.cancel()``
        and raises its own error instead, never calling ``uncancel()``. The pending request
        it leaves makes every later cancel scope in this task refuse to absorb its own
        cancellation (anyio then sees a native cancel), which escapes and cancels whatever
        task group holds the task: in the daemon, the root group. Take those requests back
        unless the block is ending by a cancellation (then they may be real). ``cancels``:
        the task's pending requests when the block began."""
        if task is None or (exc_type is not None and issubclass(exc_type, asyncio.CancelledError)):
            return
        while task.cancelling() > cancels:
            task.uncancel()

    def close(self) -> None:
        self._channel.close()

    async def submit_job(self, spec: SpecLike) -> int:
        resp = await self._stub.submit_job(pb.SubmitJobRequest(spec=spec_to_proto(spec)))
        return int(resp.job_id)

    async def job_queue(self, skip_finished: bool = False,
                        job_ids: Iterable[int] = ()) -> list[dict[str, Any]]:  # fmt: skip
        resp = await self._stub.get_job_queue(
            pb.GetJobQueueRequest(skip_finished=skip_finished, job_ids=list(job_ids))
        )
        return [job_from_proto(j) for j in resp.jobs]

    async def cancel_jobs(self, job_ids: Sequence[int] | None = None) -> list[int]:
        """Cancel these jobs (None = every non-terminal job); returns the ids cancelled.
        Returns once their processes are gone (SIGTERM, then SIGKILL after 5 s)."""
        req = pb.CancelJobsRequest(job_ids=list(job_ids or []), all=job_ids is None)
        resp = await self._stub.cancel_jobs(req, timeout=60)
        return list(resp.cancelled)

    async def tail_logs(self, job_id: int = 0, follow: bool = True, tail: int = 0,
                        node: int | None = None) -> AsyncIterator[bytes]:  # fmt: skip
        """Stream a job's log (job_id 0 = latest). Ends when the job is terminal and drained
        (follow) or at the current end of the log (no follow). node = one rank's log; None =
        the whole job (gang jobs: every rank's lines, prefixed '(head, rank=0) ' etc.)."""
        req = pb.TailLogsRequest(job_id=job_id, follow=follow, tail=tail, node=node)
        async for chunk in self._stub.tail_logs(req, timeout=STREAM_TIMEOUT_S):
            yield chunk.data

    async def tail_log_chunks(self, job_id: int = 0, follow: bool = True, tail: int = 0,
                              node: int | None = None) -> AsyncIterator[tuple[str, bytes]]:  # fmt: skip
        """:meth:`tail_logs` with each chunk's phase: "setup", "run", or "" (not known)."""
        req = pb.TailLogsRequest(job_id=job_id, follow=follow, tail=tail, node=node)
        async for chunk in self._stub.tail_logs(req, timeout=STREAM_TIMEOUT_S):
            yield chunk.phase, chunk.data

    async def status(self) -> dict[str, Any]:
        s = await self._stub.get_status(pb.GetStatusRequest())
        return {
            "version": s.version, "rank": s.rank, "cluster": s.cluster, "cpus": s.cpus,
            "memory_gb": s.memory_gb,
            "gpus": [{"index": g.index, "name": g.name, "memory_mib": g.memory_mib,
                      "uuid": g.uuid, "vendor": g.vendor} for g in s.gpus],
            "running": s.running, "pending": s.pending,
            "autostop": {"idle_minutes": s.autostop_idle_minutes if s.autostop_idle_minutes >= 0
                         else None, "down": s.autostop_down, "action": s.autostop_action},
            "idle_seconds": s.idle_seconds, "stopped": s.stopped, "started_at": s.started_at,
            "pid": s.pid,
        }  # fmt: skip

    async def set_autostop(self, idle_minutes: float, down: bool = False) -> None:
        """idle_minutes < 0 cancels autostop; fractions of a minute are allowed."""
        await self._stub.set_autostop(pb.SetAutostopRequest(idle_minutes=idle_minutes, down=down))

    async def health(self, timeout: float = 5.0) -> bool:
        """True when the agent answers; False when unreachable or not this cluster's agent
        (the TLS handshake failed)."""
        try:
            resp = await self._stub.health(pb.HealthRequest(), timeout=timeout)
        except (OSError, asyncio.TimeoutError, StreamTerminatedError):
            return False
        return bool(resp.ok)

    async def shutdown(self, exit: bool = False) -> list[int]:
        """Cancel every job (stop/down); with exit=True the agent process also exits."""
        resp = await self._stub.shutdown(pb.ShutdownRequest(exit=exit), timeout=60)
        return list(resp.cancelled)

    # ---- gang scheduling (head agent -> worker agents) ---------------------------------
    async def start_rank(self, job_id: int, rank: int, phase: str, spec: SpecLike) -> pb.RankState:
        req = pb.StartRankRequest(job_id=job_id, rank=rank, phase=phase, spec=spec_to_proto(spec))
        return await self._stub.start_rank(req)

    async def rank_status(self, job_id: int, rank: int, phase: str,
                          wait_seconds: float = 0.0) -> pb.RankState:  # fmt: skip
        req = pb.RankStatusRequest(job_id=job_id, rank=rank, phase=phase, wait_seconds=wait_seconds)
        return await self._stub.rank_status(req, timeout=wait_seconds + 30)

    async def kill_rank(self, job_id: int, rank: int) -> None:
        await self._stub.kill_rank(pb.KillRankRequest(job_id=job_id, rank=rank), timeout=60)


def read_agent_json(home: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((Path(home) / "agent.json").read_text()))
    except (OSError, ValueError):
        return None


def agent_command(home: Path, *, python: str = sys.executable, listen: str = "127.0.0.1:0",
                  rank: int = 0, cluster: str = "", extra_args: Sequence[str] = (),
                  zipapp: Path | None = None) -> list[str]:  # fmt: skip
    entry = [str(zipapp)] if zipapp else ["-m", "skyd.nodeagent"]
    cmd = [python] + entry + ["--home", str(home), "--listen", listen, "--node-rank", str(rank)]
    if cluster:
        cmd += ["--cluster", cluster]
    return cmd + list(extra_args)


def start_agent_detached_blocking(home: Path, *, timeout: float = 20.0,
                                  env: dict[str, str] | None = None,
                                  cluster_secret: str | None = None,
                                  token_file: Path | None = None,
                                  **kw: Any) -> dict[str, Any]:  # fmt: skip
    """Write fresh credentials into HOME (from the cluster secret, or the secret in
    ``token_file``, a file on this machine that is not the agent's), start an agent in its own
    session (stdio -> HOME/agent.log) and wait for a fresh HOME/agent.json. Returns
    agent.json: {pid, host, port, version, started_at, ...}. Runs in the daemon (it issues
    the credentials: needs ``cryptography``)."""
    from .credentials import write_agent_credentials

    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    if cluster_secret is None:
        if token_file is None:
            raise ValueError("start_agent_detached needs the cluster secret")
        cluster_secret = Path(token_file).read_text().strip()
    try:
        (home / "agent.json").unlink()
    except OSError:
        pass
    write_agent_credentials(home, cluster_secret)
    child_env = dict(os.environ if env is None else env)
    if getattr(sys, "frozen", False):
        # Agents outlive the daemon: never share its PyInstaller runtime (a PyInstaller
        # one-file build's temp folder goes when its process exits).
        child_env["PYINSTALLER_RESET_ENVIRONMENT"] = "1"
    if not kw.get("zipapp"):
        pp = child_env.get("PYTHONPATH")
        child_env["PYTHONPATH"] = _REPO_ROOT + (os.pathsep + pp if pp else "")
    zygote = kw.pop("zygote", None)
    argv = agent_command(home, **kw)
    pid = None
    if zygote is not None:  # a warm agent to fork from (zygote.py), or None: start fresh
        pid = zygote.spawn(argv, child_env, os.getcwd(), str(home / "agent.log"))
    if pid is not None:
        return _wait_forked(home, pid, timeout)
    with open(str(home / "agent.log"), "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, env=child_env, close_fds=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = read_agent_json(home)
        if info and (info.get("pid") == proc.pid or _parent_pid(info.get("pid")) == proc.pid):
            # (a PyInstaller one-file binary runs the agent in a child of the process we started)
            # Reap it when it exits (stop/down/autostop), or it lingers as our zombie.
            threading.Thread(target=proc.wait, name=f"reap-agent-{proc.pid}", daemon=True).start()
            return info
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    raise RuntimeError(f"node agent in {home} did not start (exit {proc.returncode}): "
                       f"{_log_tail(home)}")


def _wait_forked(home: Path, pid: int, timeout: float) -> dict[str, Any]:
    """Wait for the agent forked by the helper (its child, reaped by it) to write agent.json."""
    from .executor import pid_alive
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = read_agent_json(home)
        if info and info.get("pid") == pid:
            return info
        if not pid_alive(pid, None):
            raise RuntimeError(f"node agent in {home} did not start (it exited): "
                               f"{_log_tail(home)}")
        time.sleep(0.02)
    try:
        os.kill(pid, 9)
    except OSError:
        pass
    raise RuntimeError(f"node agent in {home} did not start in {timeout:g}s (killed): "
                       f"{_log_tail(home)}")


def _log_tail(home: Path) -> str:
    return (home / "agent.log").read_bytes()[-2000:].decode(errors="replace")


def _parent_pid(pid: Any) -> int | None:
    try:
        with open("/proc/%d/stat" % int(pid)) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError, TypeError):
        return None


async def start_agent_detached(home: Path, **kw: Any) -> dict[str, Any]:
    """Async form of start_agent_detached_blocking (runs it in a worker thread)."""
    loop = asyncio.get_event_loop()
    return await loop.run_in_executor(None, lambda: start_agent_detached_blocking(home, **kw))
