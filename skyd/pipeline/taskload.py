"""Turn a request payload (YAML text or an inline command, envs, CLI overrides) into a Task.

The CLI sends the YAML text with the directory it came from, so relative paths resolve the
way the user wrote them; parsing happens here in the daemon with the same code `skyd
validate` uses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio

from skyd.errors import InvalidSpecError

OVERRIDE_KEYS = (
    "gpus",
    "cpus",
    "memory",
    "infra",
    "instance_type",
    "use_spot",
    "num_nodes",
    "workdir",
    "disk_size",
    "image_id",
    "ports",
    "name",
    "job_recovery",
)


def load_dag_from_payload(payload: dict[str, Any]) -> Any:
    from skyd.models import load_dag

    env = dict(payload.get("env") or {})
    base_dir = Path(payload.get("base_dir") or ".")
    text = payload.get("yaml")
    command = payload.get("command")
    if text is None and command is None:
        raise InvalidSpecError("nothing to run", hint="give a task YAML or a command")
    if text is None:
        import yaml

        text = yaml.safe_dump({"run": command})
    source = payload.get("yaml_path") or "<inline>"
    from skyd.models.storage import UPLOADED_PATHS

    # A client on another host uploaded its local files (skyd.pipeline.uploads): its paths
    # resolve to those copies.
    path_map = payload.get("path_map") or {}
    if not isinstance(path_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and _is_upload(v)
            for k, v in path_map.items()):
        raise InvalidSpecError("path_map must map client paths to uploaded trees",
                               field="path_map", hint="let the client upload its files")
    token = UPLOADED_PATHS.set(path_map or None)
    try:
        # Secret values: the daemon hands the handler the request's secrets file (--secret
        # values and those taken out of the YAML text); the stored payload has none.
        return load_dag(source, text=text, env_overrides=env, base_dir=base_dir,
                        secret_overrides=dict(payload.get("secrets") or {}),
                        task_secrets=list(payload.get("_task_secrets") or ()))
    finally:
        UPLOADED_PATHS.reset(token)


def _is_upload(p: str) -> bool:
    from skyd import paths

    trees = os.path.realpath(paths.home() / "uploads" / "trees") + os.sep
    return os.path.realpath(p).startswith(trees)


def apply_overrides(task: Any, overrides: dict[str, Any] | None) -> Any:
    if not overrides:
        return task
    kw = {k: v for k, v in overrides.items() if k in OVERRIDE_KEYS and v is not None}
    return task.with_overrides(**kw) if kw else task


async def aload_dag_from_payload(payload: dict[str, Any]) -> Any:
    """load_dag_from_payload in a worker thread: YAML parsing and validation are CPU work
    (and may read files next to the YAML), never done on the event loop."""
    return await anyio.to_thread.run_sync(load_dag_from_payload, payload)


async def load_task_from_payload(payload: dict[str, Any]) -> Any:
    dag = await aload_dag_from_payload(payload)
    if len(dag.tasks) != 1:
        raise InvalidSpecError(
            f"this YAML holds {len(dag.tasks)} tasks (a pipeline)",
            hint="run pipelines with `skyd jobs launch`",
        )
    return apply_overrides(dag.tasks[0], payload.get("overrides"))
