"""Shared helpers for tests/test_jobs_*.py: a JobsManager on a temp DB and a SimClusterOps."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from skyd.jobs.controller import JobsConfig
from skyd.jobs.manager import JobsManager
from skyd.jobs.sim import SimClusterOps
from skyd.jobs.state import JobsDB


def fast_config(**kw: Any) -> JobsConfig:
    base: dict[str, Any] = dict(
        poll_interval=0.02, backoff_initial=0.01, backoff_max=0.04, recovery_rounds=2,
        user_failure_grace=0.0, unreachable_grace=2, max_concurrent_launches=8,
    )  # fmt: skip
    base.update(kw)
    return JobsConfig(**base)


@dataclass
class H:
    m: JobsManager
    sim: SimClusterOps
    db: JobsDB

    async def submit(self, sim: dict[str, Any] | None = None, **kw: Any) -> int:
        task: dict[str, Any] = {"name": kw.pop("task_name", "t"), "run": "echo hi"}
        if sim is not None:
            task["sim"] = sim
        if "resources" in kw:
            task["resources"] = kw.pop("resources")
        docs = kw.pop("docs", None) or [task]
        return await self.m.submit(docs, **kw)

    async def finish(self, job_id: int, timeout: float = 10) -> dict[str, Any]:
        with anyio.fail_after(timeout):
            await self.m.wait(job_id)
        row = await self.db.get_job(job_id)
        assert row is not None
        return row

    async def until(self, pred: Callable[[dict[str, Any]], bool], job_id: int, timeout: float = 5) -> None:
        with anyio.fail_after(timeout):
            while True:
                row = await self.db.get_job(job_id)
                assert row is not None
                if pred(row):
                    return
                await anyio.sleep(0.005)


@asynccontextmanager
async def harness(
    tmp_path: Path, sim: SimClusterOps | None = None, **cfg: Any
) -> AsyncIterator[H]:
    db = await JobsDB.open(tmp_path / "jobs.db")
    sim = sim or SimClusterOps(default_duration=0.2)
    try:
        async with anyio.create_task_group() as tg:
            m = JobsManager(
                db, sim, lambda name, fn, *a: tg.start_soon(fn, *a, name=name), fast_config(**cfg)
            )
            yield H(m, sim, db)
            tg.cancel_scope.cancel()
    finally:
        await db.close()
