"""A managed job's secret values: a 0600 file named by the ``secrets_ref`` of its dag.

The stored dag (``managed_jobs.dag``) holds the normalized tasks with ``<redacted>``
secret values; the values are in ``SKYD_HOME/secrets/jobs/<ref>.json`` as
``{"tasks": [{KEY: value}, ...]}`` (one mapping per task). The file is written before the
job row exists, read at every launch and recovery (so it survives daemon restarts), and
deleted once the job is terminal; a daemon start deletes files no active job refers to.
"""

from __future__ import annotations

import json
from typing import Any

from skyd import secretfiles
from skyd.jobs import status as st
from skyd.jobs.ops import PrecheckError, TaskSpec
from skyd.models.redaction import REDACTED


async def save(per_task: list[dict[str, str]]) -> str | None:
    """Write the file (when any task has a secret); its ref for the dag, or None."""
    if not any(per_task):
        return None
    ref = secretfiles.new_job_ref()
    await secretfiles.awrite(secretfiles.job_file(ref), {"tasks": per_task}, exclusive=True)
    return ref


async def drop(ref: str | None) -> None:
    if ref:
        await secretfiles.aremove(secretfiles.job_file(ref))


def ref_of(row: dict[str, Any]) -> str | None:
    try:
        ref = json.loads(row.get("dag") or "{}").get("secrets_ref")
    except (ValueError, AttributeError):
        return None
    return str(ref) if ref else None


async def forget_if_terminal(db: Any, job_id: int) -> None:
    row = await db.get_job(job_id)
    if row is not None and str(row["status"]) in st.TERMINAL:
        await drop(ref_of(row))


async def sweep(db: Any) -> None:
    """Delete secret files of managed jobs that will not launch again."""
    keep = {ref_of(r) for r in await db.unfinished_or_dirty() if str(r["status"]) not in st.TERMINAL}
    for ref in await secretfiles.anames("jobs"):
        if ref not in keep and not ref.startswith("svc-"):  # services' (skyd.serve.verbs)
            await drop(ref)


async def with_secrets(task: Any, spec: TaskSpec) -> Any:
    """``task`` (a Task from the stored dag) with its secret values back from the file."""
    redacted = [k for k, v in task.secrets.items() if v == REDACTED]
    if not redacted:
        return task
    data = await secretfiles.aread(secretfiles.job_file(spec.secrets_ref)) if spec.secrets_ref else None
    tasks = (data or {}).get("tasks") or []
    mine = tasks[spec.task_index] if spec.task_index < len(tasks) else {}
    missing = [k for k in redacted if k not in mine]
    if missing:
        raise PrecheckError(
            f"the secret values of managed job {spec.job_id} are gone ({', '.join(missing)})",
            hint="launch the job again (skyd jobs launch ... --secret KEY)")
    return task.model_copy(update={"secrets": {**task.secrets, **mine}})
