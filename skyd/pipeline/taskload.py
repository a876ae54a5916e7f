"""Turn a request payload (YAML text or an inline command, envs, CLI overrides) into a Task.

The CLI sends the YAML text with the directory it came from, so relative paths resolve the
way the user wrote them; parsing happens here in the daemon with the same code `skyd
validate` uses.
"""

from __future__ import annotations

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
    text, policy_config = _with_policy(text, payload)
    # Secret values: the daemon hands the handler the request's secrets file (--secret
    # values and those taken out of the YAML text); the stored payload has none.
    dag = load_dag(source, text=text, env_overrides=env, base_dir=base_dir,
                   secret_overrides=dict(payload.get("secrets") or {}),
                   task_secrets=list(payload.get("_task_secrets") or ()))
    if policy_config is not None:
        dag.policy_config = policy_config  # type: ignore[attr-defined]
    return dag


#: the verb a payload belongs to, in SkyPilot's admin-policy request names
_REQUEST_NAMES = {"jobs": "jobs.launch", "service": "serve.up"}


def _with_policy(text: str, payload: dict[str, Any]) -> tuple[str, Any]:
    """The config's ``admin_policy`` applied to the task text: (text, mutated config or
    None). A policy that raises rejects the request (exit 2, its message shown)."""
    from skyd import config

    cfg = config.current()
    spec = cfg.get("admin_policy")
    if not spec:
        return text, None
    import yaml

    from skyd.config import policy

    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    head = docs[:1] if len(docs) > 1 and isinstance(docs[0], dict) and set(docs[0]) == {"name"} else []
    body = [d for d in docs[len(head):] if isinstance(d, dict)]
    name = "serve.up" if any("service" in d for d in body) else (
        "jobs.launch" if payload.get("job_recovery") is not None or "priority" in payload else "launch")
    opts = None
    if name == "launch":
        opts = {"cluster_name": payload.get("cluster_name"),
                "idle_minutes_to_autostop": payload.get("idle_minutes"),
                "down": bool(payload.get("down")), "dryrun": bool(payload.get("dryrun"))}
    mutated, new_cfg = policy.apply(str(spec), body, cfg.data, request_name=name, options=opts)
    return yaml.safe_dump_all([*head, *mutated], sort_keys=False), cfg.with_data(new_cfg, f"admin_policy {spec}")


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
    if getattr(dag, "policy_config", None) is not None:  # the admin policy's config from now on
        from skyd import config

        config.activate(dag.policy_config)
    if len(dag.tasks) != 1:
        raise InvalidSpecError(
            f"this YAML holds {len(dag.tasks)} tasks (a pipeline)",
            hint="run pipelines with `skyd jobs launch`",
        )
    return apply_overrides(dag.tasks[0], payload.get("overrides"))
