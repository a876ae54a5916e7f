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


def check_overrides(overrides: Any) -> dict[str, Any]:
    """A payload's ``overrides``: a mapping of known keys (400 naming an unknown one);
    each value is then checked by the model as its CLI flag (``--gpus``, ...)."""
    if overrides is None:
        return {}
    if not isinstance(overrides, dict):
        raise InvalidSpecError("overrides must be a mapping of field: value", field="overrides",
                               hint="known fields: " + ", ".join(OVERRIDE_KEYS))
    for k in overrides:
        if k not in OVERRIDE_KEYS:
            from skyd.models._errors import suggest

            s = suggest(str(k), OVERRIDE_KEYS)
            raise InvalidSpecError(
                f"unknown override {str(k)[:64]!r}", field=f"overrides.{str(k)[:64]}",
                hint=(f"did you mean {s!r}? " if s else "") + "known: " + ", ".join(OVERRIDE_KEYS))
    wd = overrides.get("workdir")
    if wd is not None and (not isinstance(wd, str) or not wd.strip()):
        raise InvalidSpecError(f"--workdir must be a path, got {str(wd)[:40]!r}",
                               field="--workdir", hint="give a local directory")
    return overrides


def check_payload(payload: dict[str, Any]) -> None:
    """The task part of a payload has the right shapes (400 naming the key otherwise):
    ``yaml``/``command``/``base_dir``/``yaml_path`` strings, ``env`` a mapping of variable
    names to strings, ``overrides`` known keys. ``secrets`` are checked when the daemon takes
    them out of the payload (skyd.daemon.request_secrets)."""
    import re

    for key in ("yaml", "command", "base_dir", "yaml_path"):
        v = payload.get(key)
        if v is not None and (not isinstance(v, str) or not v):
            raise InvalidSpecError(f"{key} must be a non-empty string, got {type(v).__name__}",
                                   field=key)
    env = payload.get("env")
    if env is not None:
        if not isinstance(env, dict):
            raise InvalidSpecError("env must be a mapping of NAME: string", field="env",
                                   hint='e.g. {"LR": "0.1"} (CLI: --env LR=0.1)')
        for k, v in env.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(k)):
                raise InvalidSpecError(f"{str(k)[:64]!r} is not a valid variable name",
                                       field="env", hint="names match [A-Za-z_][A-Za-z0-9_]*")
            if not isinstance(v, str):
                raise InvalidSpecError(f"env {k} needs a string value, got {type(v).__name__}",
                                       field=f"env.{k}", hint=f'write "{k}": "..." (a string)')
    check_overrides(payload.get("overrides"))


def load_dag_from_payload(payload: dict[str, Any], *, precheck: bool = True) -> Any:
    """The payload's DAG, with its ``overrides`` applied to every task and the launch's
    precheck (skyd.models.precheck) passed: what every verb that takes a task loads, at
    submit and when it runs."""
    check_payload(payload)
    dag = _load(payload)
    ov = check_overrides(payload.get("overrides"))
    if ov:
        base = payload.get("base_dir")
        dag.tasks = [apply_overrides(t, ov, Path(base) if base else None) for t in dag.tasks]
    if precheck:
        from skyd.models.precheck import precheck as run_precheck

        run_precheck(dag, payload.get("base_dir"))
    return dag


def _load(payload: dict[str, Any]) -> Any:
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
    # Secret values: the daemon hands the handler the request's secrets file (--secret
    # values and those taken out of the YAML text); the stored payload has none.
    return load_dag(source, text=text, env_overrides=env, base_dir=base_dir,
                    secret_overrides=dict(payload.get("secrets") or {}),
                    task_secrets=list(payload.get("_task_secrets") or ()))


def apply_overrides(task: Any, overrides: dict[str, Any] | None,
                    base_dir: Path | None = None) -> Any:
    """``task`` with CLI overrides applied (idempotent: applying them again changes
    nothing, so a caller that re-applies the payload's overrides is harmless). A relative
    ``workdir`` resolves against ``base_dir`` (the payload's), else the daemon's cwd."""
    if not overrides:
        return task
    kw = {k: v for k, v in check_overrides(overrides).items() if v is not None}
    if base_dir is not None and "workdir" in kw:
        kw["base_dir"] = base_dir
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
    return dag.tasks[0]  # overrides applied by load_dag_from_payload
