"""The job driver on the head: setup on every rank in parallel, then run on every rank;
the first rank to fail kills the job on every rank. Rank 0 runs here; ranks > 0 on the
workers' agents over gRPC (mutual TLS with the head agent's own certificate). Re-entrant: after an agent restart the driver
resumes from the persisted status, and starting a phase that already started adopts it.
Python 3.8 compatible."""

# ruff: noqa: UP031, UP041, UP006, UP035, UP045  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import asyncio
import sqlite3
import ssl
from typing import Any, Optional, Tuple

from grpclib.exceptions import StreamTerminatedError

from . import jobqueue as jq
from .client import AgentClient
from .executor import Executor

Outcome = Tuple[str, Optional[int]]  # (state, exit_code) as Executor.poll


class LocalRank:
    def __init__(self, ex: Executor, job_id: int, spec: dict[str, Any], slots: list[int]) -> None:
        self.ex, self.job_id, self.spec, self.slots, self.rank = ex, job_id, spec, slots, 0

    async def start(self, phase: str) -> None:
        self.ex.start(self.job_id, 0, phase, self.spec, self.slots)

    async def wait(self, phase: str) -> Outcome:
        return await self.ex.wait(self.job_id, 0, phase)

    async def kill(self) -> None:
        await self.ex.kill(self.job_id, 0)


class RemoteRank:
    def __init__(self, address: str, tls: ssl.SSLContext | None, job_id: int, rank: int,
                 spec: dict[str, Any], lease_s: float = 30.0) -> None:  # fmt: skip
        host, _, port = address.rpartition(":")
        self.client = AgentClient(host, int(port), ssl=tls)
        self.job_id, self.rank, self.spec = job_id, rank, spec
        # the worker ends a rank its head has not asked about for lease_s: ask well within
        # it; and a worker unreachable for lease_s is lost
        self.lease_s = lease_s
        self.poll_s = min(10.0, lease_s / 3)

    async def start(self, phase: str) -> None:
        await self.client.start_rank(self.job_id, self.rank, phase, self.spec)

    async def wait(self, phase: str) -> Outcome:
        loop = asyncio.get_event_loop()
        unreachable_since = None  # type: Optional[float]
        while True:
            try:
                st = await self.client.rank_status(self.job_id, self.rank, phase,
                                                   wait_seconds=self.poll_s)  # fmt: skip
                unreachable_since = None
            except (OSError, asyncio.TimeoutError, StreamTerminatedError):
                # worker unreachable: retry every second; after lease_s the rank is lost
                now = loop.time()
                if unreachable_since is None:
                    unreachable_since = now
                if now - unreachable_since >= self.lease_s:
                    return "lost", None
                await asyncio.sleep(1.0)
                continue
            if st.state not in ("running", "starting"):
                return st.state, st.exit_code

    async def kill(self) -> None:
        try:
            await self.client.kill_rank(self.job_id, self.rank)
        except Exception:  # best effort: the worker may be gone already
            pass

    def close(self) -> None:
        self.client.close()


def make_ranks(ex: Executor, job: dict[str, Any], tls: ssl.SSLContext | None,
               lease_s: float = 30.0) -> list[Any]:  # fmt: skip
    spec = dict(job["spec"], secrets=ex.load_secrets(job["job_id"]))  # in memory only
    ranks: list[Any] = [LocalRank(ex, job["job_id"], spec, job["gpu_slots"])]
    for node in sorted(spec["nodes"], key=lambda n: n["rank"]):
        if node["rank"] > 0:
            ranks.append(RemoteRank(node["address"], tls, job["job_id"], node["rank"], spec,
                                    lease_s))
    return ranks


async def _run_phase(ranks: list[Any], phase: str) -> tuple[bool, int | None, str]:
    """Start the phase on all ranks, wait; (ok, exit_code, reason). Stops at the first failure."""
    async def start(r: Any) -> None:
        try:
            await r.start(phase)
        except Exception as e:
            raise RuntimeError("rank %d: %s" % (r.rank, e)) from e  # which node failed

    try:
        await asyncio.gather(*(start(r) for r in ranks))
    except Exception as e:
        return False, None, f"could not start {phase} on every node: {e}"
    waits = {asyncio.ensure_future(r.wait(phase)): r for r in ranks}
    try:
        pending = set(waits)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                state, code = t.result()
                if state != "done" or code != 0:
                    rank = waits[t].rank
                    what = f"exited with {code}" if state == "done" else f"was {state}"
                    return False, code if state == "done" else None, "%s on rank %d %s" % (
                        phase, rank, what)  # fmt: skip
        return True, 0, ""
    finally:
        for t in waits:
            t.cancel()


async def drive(queue: jq.JobQueue, job_id: int, ranks: list[Any]) -> str:
    """Run the job to a terminal status (persisted). Cancellation of this coroutine leaves the
    processes alone (agent exit); callers that cancel a job kill the ranks themselves."""
    job = queue.get(job_id)
    assert job is not None
    try:
        return await _drive(queue, job_id, job, ranks)
    except (asyncio.CancelledError, OSError, sqlite3.Error):
        raise  # agent exit / storage: the next driver adopts the ranks
    except Exception:
        # A driver error ends the job (FAILED_DRIVER): end its ranks on every node too.
        await asyncio.gather(*(r.kill() for r in ranks), return_exceptions=True)
        raise
    finally:
        for r in ranks:
            if isinstance(r, RemoteRank):
                r.close()


async def _drive(queue: jq.JobQueue, job_id: int, job: dict[str, Any], ranks: list[Any]) -> str:
    if job["status"] == jq.SETTING_UP:
        if job["spec"].get("setup"):
            ok, code, reason = await _run_phase(ranks, "setup")
            if not ok:
                await asyncio.gather(*(r.kill() for r in ranks))
                status = jq.FAILED_SETUP if code is not None else jq.FAILED_DRIVER
                queue.set_status(job_id, status, exit_code=code, reason=reason)
                return status
        job = queue.set_status(job_id, jq.RUNNING)
    ok, code, reason = await _run_phase(ranks, "run")
    await asyncio.gather(*(r.kill() for r in ranks))  # failed: stop others; ok: reap leftovers
    if ok:
        status = jq.SUCCEEDED
    else:
        status = jq.FAILED if code is not None else jq.FAILED_DRIVER
    queue.set_status(job_id, status, exit_code=code, reason=reason)
    return status
