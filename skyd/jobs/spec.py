"""What a managed job stores about its tasks (the `dag` column) and how a TaskSpec is built.

The stored dag is JSON: {"tasks": [{"name", "task", "recovery", "region_pinned",
"zone_pinned"}], "envs": {...}}. `task` is the normalized task dict, opaque here except for
`resources` (job_recovery, region/zone/infra pins) which is read with SkyPilot's schema.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from skyd.errors import InvalidSpecError
from skyd.jobs.ops import RecoverySettings, TaskSpec


def _resource_dicts(task: dict[str, Any]) -> list[dict[str, Any]]:
    res = task.get("resources") or {}
    if isinstance(res, list):
        return [r for r in res if isinstance(r, dict)]
    if not isinstance(res, dict):
        return []
    out = [res]
    for key in ("any_of", "ordered"):
        for sub in res.get(key) or []:
            if isinstance(sub, dict):
                out.append({**res, **sub})
    return out


def recovery_from_task(task: dict[str, Any], override: str | None = None) -> RecoverySettings:
    strategy: str | None = None
    max_restarts = 0
    codes: tuple[int, ...] = ()
    for r in _resource_dicts(task):
        jr = r.get("job_recovery", r.get("spot_recovery"))
        if jr is None:
            continue
        if isinstance(jr, str):
            strategy = jr
        elif isinstance(jr, dict):
            strategy = jr.get("strategy") or strategy
            try:
                max_restarts = int(jr.get("max_restarts_on_errors", 0) or 0)
                raw = jr.get("recover_on_exit_codes") or []
                codes = tuple(int(c) for c in ([raw] if isinstance(raw, int) else raw))
            except (TypeError, ValueError):
                raise InvalidSpecError(
                    "max_restarts_on_errors and recover_on_exit_codes must be integers",
                    field="resources.job_recovery",
                    hint="e.g. job_recovery: {max_restarts_on_errors: 3, recover_on_exit_codes: [33]}",
                ) from None
            if max_restarts < 0:
                raise InvalidSpecError(
                    "must be >= 0", field="resources.job_recovery.max_restarts_on_errors"
                )
        break
    if override:
        strategy = override
    if strategy is not None and strategy.lower() == "none":
        strategy = None
    return RecoverySettings(strategy and strategy.upper(), max_restarts, codes)


def pins_from_task(task: dict[str, Any]) -> tuple[bool, bool]:
    region = zone = False
    rs = _resource_dicts(task)
    for r in rs:
        infra = str(r.get("infra") or "")
        parts = [p for p in infra.split("/") if p] if infra else []
        region = region or bool(r.get("region")) or len(parts) >= 2
        zone = zone or bool(r.get("zone")) or len(parts) >= 3
    return region, zone


def task_entry(task: dict[str, Any], index: int, override: str | None = None) -> dict[str, Any]:
    rec = recovery_from_task(task, override)
    rp, zp = pins_from_task(task)
    return {
        "name": str(task.get("name") or f"task-{index}"),
        "task": task,
        "recovery": {
            "strategy": rec.strategy,
            "max_restarts_on_errors": rec.max_restarts_on_errors,
            "recover_on_exit_codes": list(rec.recover_on_exit_codes),
        },
        "region_pinned": rp,
        "zone_pinned": zp,
    }


def build_dag(
    docs: list[dict[str, Any]], *, envs: dict[str, str] | None = None, override: str | None = None
) -> tuple[str | None, dict[str, Any]]:
    """Task dicts (one per YAML document) → (pipeline name, stored dag). A first document
    holding only `name` names the pipeline, as in SkyPilot."""
    docs = [d for d in docs if d is not None]
    name: str | None = None
    if len(docs) > 1 and set(docs[0]) <= {"name"}:
        name = docs[0].get("name")
        docs = docs[1:]
    if not docs:
        raise InvalidSpecError("no task in the YAML", hint="give a task with at least `run:`")
    for i, d in enumerate(docs):
        if not isinstance(d, dict):
            raise InvalidSpecError(f"document {i + 1} is not a mapping", hint="a task is a YAML mapping")
    if name is None:
        name = docs[0].get("name")
    tasks = []
    for i, d in enumerate(docs):
        t = dict(d)
        if envs:
            t["envs"] = {**(t.get("envs") or {}), **envs}
        tasks.append(task_entry(t, i, override))
    return name, {"tasks": tasks}


def dag_strategy(dag: dict[str, Any]) -> str | None:
    for t in dag.get("tasks", []):
        s = t.get("recovery", {}).get("strategy")
        if s:
            return str(s)
    return None


def task_env_ids(job_id: int, task_index: int, name: str | None, submitted_at: float) -> dict[str, str]:
    """The ids a job sees; derived only from persisted fields so they survive recoveries
    and daemon restarts."""
    ts = datetime.fromtimestamp(submitted_at, UTC).strftime("%Y-%m-%d-%H-%M-%S-%f")
    task_id = f"sky-managed-{ts}_{name or 'job'}_{job_id}-{task_index}"
    return {
        "SKYPILOT_TASK_ID": task_id,
        "SKYD_TASK_ID": task_id,
        "SKYPILOT_MANAGED_JOB_ID": str(job_id),
        "SKYD_MANAGED_JOB_ID": str(job_id),
    }


def task_spec(row: dict[str, Any], dag: dict[str, Any], task_index: int, attempt: int) -> TaskSpec:
    entry = dag["tasks"][task_index]
    rec = entry.get("recovery") or {}
    return TaskSpec(
        name=entry["name"],
        task=entry["task"],
        job_id=int(row["id"]),
        task_index=task_index,
        attempt=attempt,
        envs=task_env_ids(int(row["id"]), task_index, row.get("name"), float(row["submitted_at"])),
        recovery=RecoverySettings(
            rec.get("strategy"),
            int(rec.get("max_restarts_on_errors") or 0),
            tuple(int(c) for c in rec.get("recover_on_exit_codes") or ()),
        ),
        region_pinned=bool(entry.get("region_pinned")),
        zone_pinned=bool(entry.get("zone_pinned")),
        secrets_ref=dag.get("secrets_ref"),
        catalog_dir=dag.get("catalog_dir"),
    )


def load_dag(row: dict[str, Any]) -> dict[str, Any]:
    dag: dict[str, Any] = json.loads(row["dag"])
    return dag
