"""gRPC handlers of the NodeAgent service: translate messages to Agent calls.
Python 3.8 compatible."""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from ..proto import skyd_agent as pb
from . import VERSION, logs
from . import jobqueue as jq
from .core import Agent, SpecError
from .gang import RemoteRank
from .spec import job_to_proto, spec_to_dict


class NodeAgentService(pb.NodeAgentBase):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def _job(self, job_id: int) -> dict[str, Any]:
        if job_id == 0:
            job_id = self.agent.queue.latest_id() or 0
        job = self.agent.queue.get(job_id)
        if job is None:
            raise GRPCError(Status.NOT_FOUND, "job %d not found on this cluster" % job_id)
        return job

    async def submit_job(self, req: pb.SubmitJobRequest) -> pb.SubmitJobResponse:
        try:
            job_id = self.agent.submit(spec_to_dict(req.spec))
        except SpecError as e:
            raise GRPCError(Status.INVALID_ARGUMENT, str(e)) from None
        self.agent.schedule()  # start at once if it fits
        return pb.SubmitJobResponse(job_id=job_id)

    async def get_job_queue(self, req: pb.GetJobQueueRequest) -> pb.GetJobQueueResponse:
        jobs = self.agent.queue.list(req.skip_finished, req.job_ids)
        return pb.GetJobQueueResponse(
            jobs=[job_to_proto(j, str(self.agent.log_path(j["job_id"]))) for j in jobs]
        )

    async def cancel_jobs(self, req: pb.CancelJobsRequest) -> pb.CancelJobsResponse:
        ids = None if req.all else list(req.job_ids)
        return pb.CancelJobsResponse(cancelled=await self.agent.cancel(ids))

    async def tail_logs(self, req: pb.TailLogsRequest) -> AsyncIterator[pb.LogChunk]:
        agent = self.agent
        agent.touch()
        if agent.rank > 0:
            # Worker side: this node runs one rank of its head's jobs.
            path = agent.ex.log_path(req.job_id, agent.rank)
            done = lambda: agent.rank_finished(req.job_id, agent.rank)  # noqa: E731
            offset = lambda: agent.ex.run_offset(req.job_id, agent.rank)  # noqa: E731
            async for phase, data in logs.tail_file_phased(path, req.follow, req.tail, done, offset):
                yield pb.LogChunk(data=data, phase=phase)
            return
        job = self._job(req.job_id)
        job_id, spec = job["job_id"], job["spec"]

        def terminal() -> bool:
            j = agent.queue.get(job_id)
            return j is None or j["status"] in jq.TERMINAL

        nodes = {n["rank"]: n for n in spec["nodes"]}
        if spec["num_nodes"] <= 1 or req.node == 0:
            # One log: chunks carry their phase (setup / run), so followers show stage
            # lines and output in the order they happened.
            offset = lambda: agent.ex.run_offset(job_id, 0)  # noqa: E731
            async for phase, data in logs.tail_file_phased(agent.log_path(job_id), req.follow,
                                                           req.tail, terminal, offset):
                agent.touch()
                yield pb.LogChunk(data=data, phase=phase)
            return
        if req.node is not None:
            if req.node not in nodes:
                raise GRPCError(Status.NOT_FOUND, "job %d has no node %d" % (job_id, req.node))
            it = self._remote_tail(nodes[req.node], job_id, req)
        else:
            streams = [("(head, rank=0) ", logs.tail_file(agent.log_path(job_id), req.follow,
                                                          req.tail, terminal))]  # fmt: skip
            for r in sorted(nodes):
                if r > 0:
                    label = "(worker%d, rank=%d) " % (r, r)
                    streams.append((label, self._remote_tail(nodes[r], job_id, req)))
            it = logs.merge_prefixed(streams, stop_after=terminal)
        async for data in it:
            agent.touch()
            yield pb.LogChunk(data=data)

    async def _remote_tail(self, node: dict[str, Any], job_id: int,
                           req: pb.TailLogsRequest) -> AsyncIterator[bytes]:  # fmt: skip
        rr = RemoteRank(node["address"], self.agent.peer_ssl, job_id, node["rank"], {})
        try:
            async for data in rr.client.tail_logs(job_id, req.follow, req.tail, node["rank"]):
                yield data
        finally:
            rr.close()

    async def get_status(self, req: pb.GetStatusRequest) -> pb.NodeStatus:
        a = self.agent
        counts, auto = a.counts(), a.autostop
        return pb.NodeStatus(
            version=VERSION, rank=a.rank, cluster=a.cluster, cpus=a.capacity.cpus,
            memory_gb=a.memory_gb,
            gpus=[pb.GpuInfo(index=g.index, name=g.name, memory_mib=g.memory_mib, uuid=g.uuid,
                             vendor=g.vendor) for g in a.gpus],
            running=counts["running"], pending=counts["pending"],
            autostop_idle_minutes=auto["idle_minutes"], autostop_down=auto["down"],
            idle_seconds=a.idle_seconds(), stopped=bool(a.queue.meta("stopped", False)),
            started_at=a.started_at, pid=os.getpid(), autostop_action=a.autostop_action,
        )  # fmt: skip

    async def set_autostop(self, req: pb.SetAutostopRequest) -> pb.SetAutostopResponse:
        self.agent.set_autostop(req.idle_minutes, req.down)
        return pb.SetAutostopResponse()

    async def health(self, req: pb.HealthRequest) -> pb.HealthResponse:
        return pb.HealthResponse(ok=True, version=VERSION)

    def _rank_state(self, job_id: int, rank: int, phase: str) -> pb.RankState:
        state, code = self.agent.ex.poll(job_id, rank, phase)
        return pb.RankState(job_id=job_id, rank=rank, phase=phase, state=state, exit_code=code)

    async def start_rank(self, req: pb.StartRankRequest) -> pb.RankState:
        if req.phase not in ("setup", "run"):
            raise GRPCError(Status.INVALID_ARGUMENT, "phase must be setup or run")
        self.agent.head_contact(req.job_id)
        try:
            self.agent.start_rank(req.job_id, req.rank, req.phase, spec_to_dict(req.spec))
        except SpecError as e:
            raise GRPCError(Status.RESOURCE_EXHAUSTED, str(e)) from None
        return self._rank_state(req.job_id, req.rank, req.phase)

    async def rank_status(self, req: pb.RankStatusRequest) -> pb.RankState:
        self.agent.head_contact(req.job_id)
        asking = self.agent.head_asking
        asking[req.job_id] = asking.get(req.job_id, 0) + 1  # a head waiting is a head asking
        try:
            if req.wait_seconds > 0:
                await self.agent.ex.wait(req.job_id, req.rank, req.phase, timeout=req.wait_seconds)
            return self._rank_state(req.job_id, req.rank, req.phase)
        finally:
            asking[req.job_id] -= 1
            if not asking[req.job_id]:
                del asking[req.job_id]
            self.agent.head_contact(req.job_id)

    async def kill_rank(self, req: pb.KillRankRequest) -> pb.KillRankResponse:
        await self.agent.kill_rank(req.job_id, req.rank)
        return pb.KillRankResponse()

    async def shutdown(self, req: pb.ShutdownRequest) -> pb.ShutdownResponse:
        cancelled: list[int] = await self.agent.cancel(None)
        for row in self.agent.queue.running_ranks():  # worker ranks of a head's jobs
            await self.agent.kill_rank(row["job_id"], row["rank"])
        if req.exit:
            asyncio.get_event_loop().call_later(0.2, self.agent.exit_requested.set)
        return pb.ShutdownResponse(cancelled=cancelled)
