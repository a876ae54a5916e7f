"""Submit-time checks of the cluster verbs' payloads (see `register_verb(check=...)`).

They run before a request exists: a payload that fails answers 400 naming the field (the
CLI exits 2), leaves no request row, and so is never resumed after a restart. The task
itself is parsed here too (bounded by the loader), in a worker thread.
"""

from __future__ import annotations

from typing import Any

import anyio

from skyd import bounds
from skyd.daemon.http import MAX_ID, number
from skyd.errors import InvalidSpecError
from skyd.names import check_optional_name

MAX_IDLE_MINUTES = int(bounds.BOUNDS["idle_minutes"].hi)  # ten years: longer is "never"


def _flag(payload: dict[str, Any], key: str) -> None:
    v = payload.get(key)
    if v is not None and not isinstance(v, bool):
        raise InvalidSpecError(f"{key} must be true or false, got {v!r}", field=key)


def _string(payload: dict[str, Any], key: str, *, required: bool = False) -> None:
    v = payload.get(key)
    if v is None and not required:
        return
    if not isinstance(v, str) or not v:
        raise InvalidSpecError(f"{key} must be a non-empty string, got {v!r}", field=key)


def _load(payload: dict[str, Any], *, single: bool) -> Any:
    from skyd.pipeline.taskload import load_dag_from_payload

    dag = load_dag_from_payload(payload)  # shapes checked, overrides applied, precheck passed
    if single and len(dag.tasks) != 1:
        raise InvalidSpecError(f"this YAML holds {len(dag.tasks)} tasks (a pipeline)",
                               hint="run pipelines with `skyd jobs launch`")
    return dag


def capacity(tasks: list[Any]) -> None:
    """num_nodes against what the infras can ever hold (see planner.check_capacity)."""
    from skyd.pipeline.planner import check_capacity

    for t in tasks:
        check_capacity(t)


async def _parse(payload: dict[str, Any], *, single: bool, launch: bool = False) -> None:
    def run() -> None:
        from skyd.pipeline import parsememo

        dag = _load(payload, single=single)
        if launch:  # a dry run may plan over catalogs this build cannot launch on
            capacity(list(dag.tasks))
        # the request's handler takes this DAG rather than parsing the YAML again
        parsememo.keep(parsememo.key(payload, True), dag)

    await anyio.to_thread.run_sync(run)


async def check_launch(payload: dict[str, Any]) -> None:
    check_optional_name(payload.get("cluster_name"), kind="cluster", field="cluster_name")
    bounds.check(payload.get("idle_minutes"), "idle_minutes")
    for key in ("dryrun", "detach_run", "down", "no_setup", "retry_until_up"):
        _flag(payload, key)
    _string(payload, "plan_id")  # the plan a dry run showed (skyd.pipeline.plancache)
    if len(str(payload.get("plan_id") or "")) > 64:
        raise InvalidSpecError("plan_id is too long (a dry run's plan_id is 16 characters)",
                               field="plan_id", hint="send the plan_id a dry run returned")
    if payload.get("minimize", "cost") not in ("cost", "time"):
        raise InvalidSpecError(f"minimize must be 'cost' or 'time', got {payload['minimize']!r}",
                               field="minimize")
    dry = bool(payload.get("dryrun"))
    await _parse(payload, single=not dry, launch=not dry)


async def check_exec(payload: dict[str, Any]) -> None:
    _string(payload, "cluster_name", required=True)  # an existing cluster: looked up, not made
    _flag(payload, "detach_run")
    await _parse(payload, single=True)


def _targets(payload: dict[str, Any]) -> None:
    names = payload.get("clusters")
    if names is not None and (not isinstance(names, list)
                              or not all(isinstance(n, str) and n for n in names)):
        raise InvalidSpecError("clusters must be a list of cluster names", field="clusters")
    _string(payload, "cluster_name")
    _flag(payload, "all")


async def check_targets(payload: dict[str, Any]) -> None:
    """stop / start / down: existing clusters, by name -- whatever their names are."""
    _targets(payload)


async def check_autostop(payload: dict[str, Any]) -> None:
    _targets(payload)
    _flag(payload, "down")
    _flag(payload, "cancel")
    number(payload.get("idle_minutes"), "idle_minutes", lo=-1, hi=MAX_IDLE_MINUTES)


async def check_cancel(payload: dict[str, Any]) -> None:
    _string(payload, "cluster_name", required=True)
    _flag(payload, "all")
    ids = payload.get("job_ids")
    if ids is not None:
        if not isinstance(ids, list):
            raise InvalidSpecError("job_ids must be a list of job ids", field="job_ids")
        for i in ids:
            number(i, "job_ids", lo=1, hi=MAX_ID, integer=True)
