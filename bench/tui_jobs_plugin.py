"""Bench-only daemon plugin: GET /v1/jobs from the managed_jobs table, for daemons that do
not serve managed jobs yet (loaded with SKYD_EXTRA_PLUGINS=bench.tui_jobs_plugin)."""

from __future__ import annotations

from typing import Any

from skyd.daemon.registry import READS, register_read


async def _jobs(ctx: Any, request: Any) -> Any:
    return await ctx.store.fetchall(
        "SELECT id, name, status, schedule_state, submitted_at, started_at, ended_at, "
        "recoveries, cluster, cluster_job_id FROM managed_jobs ORDER BY id DESC")


if ("GET", "/v1/jobs") not in READS:
    register_read("GET", "/v1/jobs", _jobs, summary="managed jobs (bench stand-in)")
