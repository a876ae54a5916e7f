"""Following a job on its cluster: stage transitions from its status, its log as events."""

from __future__ import annotations

import json
from typing import Any

import anyio

from skyd.clouds.base import ClusterHandle, Provisioner
from skyd.pipeline import clusters_db as cdb
from skyd.pipeline.agents import agent

WAITING = {"INIT", "PENDING"}
POLL_S = 0.2
RUNNING_POLL_S = 1.0
HANDOFF_S = 1.0  # how long the status poll leaves SETUP -> EXEC to the log stream


def _find(queue: list[dict[str, Any]], job_id: int) -> dict[str, Any] | None:
    for j in queue:
        if int(j["job_id"]) == job_id:
            return j
    return None


async def job_row(prov: Provisioner, handle: ClusterHandle, job_id: int) -> dict[str, Any] | None:
    async with agent(prov, handle, 0) as c:
        return _find(await c.job_queue(), job_id)


async def follow_job(
    ctx: Any,
    prov: Provisioner,
    handle: ClusterHandle,
    job_id: int,
    *,
    with_setup: bool,
    detach: bool,
) -> dict[str, Any]:
    store = ctx.store
    name = handle.cluster_name
    result: dict[str, Any] = {"cluster": name, "job_id": job_id}
    if detach:
        row = await job_row(prov, handle, job_id)
        if row:
            await cdb.upsert_jobs(store, name, [row])
        result["status"] = row["status"] if row else "PENDING"
        return result  # the client says where it runs and how to follow it (one line)

    final: dict[str, Any] = {}

    logs_done = anyio.Event()
    # Stage lines and output in the order they happened: the log stream tags each chunk
    # "setup" or "run", so its first run chunk closes SETUP before it is shown; the status
    # poll does the same for jobs whose log says nothing (or an agent that does not tag).
    st = {"setup": "idle", "exec": False, "untagged": False}
    lock = anyio.Lock()
    exec_seen = anyio.Event()

    async def setup_started() -> None:
        async with lock:
            if with_setup and st["setup"] == "idle":
                await ctx.stage("SETUP", "start")
                st["setup"] = "running"

    async def exec_started(failed_setup: bool = False) -> None:
        async with lock:
            if with_setup and st["setup"] != "done":
                if st["setup"] == "idle":
                    await ctx.stage("SETUP", "start")
                await ctx.stage("SETUP", "failed" if failed_setup else "done")
                st["setup"] = "done"
            if not st["exec"] and not failed_setup:
                await ctx.stage("EXEC", "start", job_id=job_id)
                st["exec"] = True
                exec_seen.set()

    async def watch_status() -> None:
        async with agent(prov, handle, 0) as c:
            while True:
                row = _find(await c.job_queue(), job_id)
                status = row["status"] if row else "PENDING"
                if row and status in cdb.TERMINAL_JOB:
                    final.update(row)
                    return  # the last stage lines follow the drained log (below)
                if status == "SETTING_UP":
                    await setup_started()
                elif status not in WAITING and not st["exec"]:
                    # Running: the log stream closes SETUP at the run's first output (it
                    # knows where setup's output ends); a run that prints nothing, or an
                    # agent whose stream is untagged, gets it from here a moment later.
                    with anyio.move_on_after(0 if st["untagged"] else HANDOFF_S):
                        await exec_seen.wait()
                    await exec_started()
                # Quick while the job starts (stage lines), then 1 s while it runs; the end of
                # its log stream (the job is over) wakes this at once.
                if logs_done.is_set():
                    # The agent ends the stream once the job is terminal: normally the poll
                    # right after sees it; if not (stream broke), keep polling quickly.
                    await anyio.sleep(POLL_S)
                    continue
                with anyio.move_on_after(POLL_S if not st["exec"] else RUNNING_POLL_S):
                    await logs_done.wait()

    # A request resumed after a daemon restart already emitted part of the log: skip it.
    skip = 0
    if getattr(ctx, "resumed", False) and getattr(ctx, "log_path", None):
        skip = await anyio.to_thread.run_sync(emitted_job_log_bytes, ctx.log_path, job_id)

    async def stream_logs() -> None:
        nonlocal skip
        try:
            async with agent(prov, handle, 0) as c:
                async for phase, chunk in c.tail_log_chunks(job_id, follow=True):
                    st["untagged"] = st["untagged"] or not phase
                    if phase == "setup" and chunk:
                        await setup_started()
                    elif phase == "run":
                        await exec_started()
                    if skip:
                        cut = min(skip, len(chunk))
                        chunk, skip = chunk[cut:], skip - cut
                        if not chunk:
                            continue
                    ctx.emit({"type": "job_log", "job_id": job_id,
                              "text": chunk.decode("utf-8", "replace")})
        finally:
            logs_done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stream_logs)
        await watch_status()
        # The log stream ends by itself once the job is terminal and drained; bound the wait.
        with anyio.move_on_after(5):
            await logs_done.wait()
        tg.cancel_scope.cancel()
    status = final.get("status")
    await exec_started(failed_setup=status == "FAILED_SETUP")
    if st["exec"]:
        await ctx.stage("EXEC", "done" if status == "SUCCEEDED" else "failed", status=status)
    await cdb.upsert_jobs(store, name, [final])
    await cdb.touch(store, name)
    result.update(status=final.get("status"), exit_code=final.get("exit_code"))
    return result


def emitted_job_log_bytes(log_path: Any, job_id: int) -> int:
    """Bytes of job `job_id`'s log a request already emitted (its event log file)."""
    total = 0
    try:
        with open(log_path, "rb") as f:
            for line in f:
                if b'"job_log"' not in line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("type") == "job_log" and ev.get("job_id", job_id) == job_id:
                    total += len(str(ev.get("text", "")).encode("utf-8"))
    except OSError:
        return 0
    return total
