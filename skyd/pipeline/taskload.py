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


# Overrides applied after the model's own (--git-url/--git-ref, --disk-tier/--network-tier).
EXTRA_OVERRIDE_KEYS = ("git_url", "git_ref", "disk_tier", "network_tier")


def check_overrides(overrides: Any) -> dict[str, Any]:
    """A payload's ``overrides``: a mapping of known keys (400 naming an unknown one);
    each value is then checked by the model as its CLI flag (``--gpus``, ...)."""
    if overrides is None:
        return {}
    if not isinstance(overrides, dict):
        raise InvalidSpecError("overrides must be a mapping of field: value", field="overrides",
                               hint="known fields: " + ", ".join(OVERRIDE_KEYS))
    for k in overrides:
        if k not in OVERRIDE_KEYS and k not in EXTRA_OVERRIDE_KEYS:
            from skyd.models._errors import suggest

            s = suggest(str(k), OVERRIDE_KEYS + EXTRA_OVERRIDE_KEYS)
            raise InvalidSpecError(
                f"unknown override {str(k)[:64]!r}", field=f"overrides.{str(k)[:64]}",
                hint=(f"did you mean {s!r}? " if s else "") + "known: "
                + ", ".join(OVERRIDE_KEYS + EXTRA_OVERRIDE_KEYS))
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


def load_dag_from_payload(payload: dict[str, Any], *, precheck: bool = True,
                          take: bool = False) -> Any:
    """The payload's DAG, with its ``overrides`` applied to every task and the launch's
    precheck (skyd.models.precheck) passed: what every verb that takes a task loads, at
    submit and when it runs. ``take``: a request's handler takes the DAG its submit-time
    check parsed when there is one (skyd.pipeline.parsememo) rather than parsing again."""
    from skyd.pipeline import parsememo

    if take:
        kept = parsememo.take(parsememo.key(payload, precheck))
        if kept is not None:
            return kept
    check_payload(payload)
    parsememo.parsed()
    dag = _load(payload)
    ov = check_overrides(payload.get("overrides"))
    if ov:
        base = payload.get("base_dir")
        dag.tasks = [apply_overrides(t, ov, Path(base) if base else None) for t in dag.tasks]
    _only_uploads(dag)
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
    text, policy_config = _with_policy(text, payload)
    # Secret values: the daemon hands the handler the request's secrets file (--secret
    # values and those taken out of the YAML text); the stored payload has none.
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
        dag = load_dag(source, text=text, env_overrides=env, base_dir=base_dir,
                       secret_overrides=dict(payload.get("secrets") or {}),
                       task_secrets=list(payload.get("_task_secrets") or ()))
    finally:
        UPLOADED_PATHS.reset(token)
    if policy_config is not None:
        dag.policy_config = policy_config  # type: ignore[attr-defined]
    return dag


def _only_uploads(dag: Any) -> None:
    """A shared daemon runs every user's request as its own user: a caller other than that
    user names files of this host only through uploads (their own laptop's files), never
    a path of the host the daemon's user may read and they may not."""
    from skyd.daemon.owners import current_user, daemon_user
    from skyd.models.storage import is_bucket_uri

    if current_user() == daemon_user():
        return
    for t in dag.tasks:
        named: list[tuple[str, str]] = []
        if isinstance(t.workdir, str):
            named.append(("workdir", t.workdir))
        for dst, fm in (t.file_mounts or {}).items():
            src = getattr(fm, "source", None)
            for s in src if isinstance(src, list) else [src]:
                if isinstance(s, str) and not is_bucket_uri(s):
                    named.append((f"file_mounts.{dst}", s))
        for field, p in named:
            if not _is_upload(p):
                raise InvalidSpecError(
                    f"{field} {p[:200]!r} is a path on the daemon's host: a shared daemon "
                    f"takes another user's local files only as uploads", field=field,
                    hint="use the skyd CLI or SDK from your machine (it uploads them), or a "
                         "bucket")


def _is_upload(p: str) -> bool:
    from skyd import paths

    trees = os.path.realpath(paths.home() / "uploads" / "trees") + os.sep
    return os.path.realpath(p).startswith(trees)


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

    from skyd.config.layers import safe_load_all
    from skyd.sky import policy

    docs = [d for d in safe_load_all(text, str(payload.get("yaml_path") or "<inline>"))
            if d is not None]
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


def load_dag_with_overrides(payload: dict[str, Any]) -> Any:
    """load_dag_from_payload with the payload's CLI overrides (``--gpus``, ``--infra``,
    ...) applied, as ``jobs launch`` and ``serve up/update`` take them (SkyPilot refuses
    them for a pipeline, and so does skyd)."""
    dag = load_dag_from_payload(payload)
    ov = payload.get("overrides")
    if ov is not None and not isinstance(ov, dict):
        raise InvalidSpecError("overrides must be a mapping", field="overrides")
    if ov and any(v is not None for v in ov.values()):
        if len(dag.tasks) > 1:
            raise InvalidSpecError(
                "resource overrides (--gpus, --infra, ...) cannot be used with a pipeline",
                field="overrides", hint="set the resources in each task of the YAML")
        dag.tasks = [apply_overrides(t, ov) for t in dag.tasks]
    return dag


def apply_overrides(task: Any, overrides: dict[str, Any] | None,
                    base_dir: Path | None = None) -> Any:
    """``task`` with CLI overrides applied (idempotent: applying them again changes
    nothing, so a caller that re-applies the payload's overrides is harmless). A relative
    ``workdir`` resolves against ``base_dir`` (the payload's), else the daemon's cwd."""
    if not overrides:
        return task
    overrides = check_overrides(overrides)
    kw = {k: v for k, v in overrides.items() if k in OVERRIDE_KEYS and v is not None}
    task = task.with_overrides(**kw) if kw else task
    task = _git_override(task, overrides.get("git_url"), overrides.get("git_ref"))
    tiers = {k: overrides[k] for k in TIER_KEYS if overrides.get(k) is not None}
    if tiers:  # --disk-tier / --network-tier: on every candidate, checked as the YAML's are
        from pydantic import ValidationError

        from skyd.models import Resources

        for k, v in tiers.items():
            try:
                Resources.model_validate({k: v})
            except ValidationError:
                raise InvalidSpecError(f"{v!r} is not a {k.replace('_', ' ')}",
                                       field="--" + k.replace("_", "-"),
                                       hint=TIER_HINTS[k]) from None
        task = task.model_copy(update={"resources": [r.copy(**tiers) for r in task.resources]})
    return task


def _git_override(task: Any, url: Any, ref: Any) -> Any:
    """``--git-url`` / ``--git-ref``: the workdir becomes that repository at that ref
    (``--git-ref`` alone: the YAML's git workdir at another ref), as in SkyPilot."""
    if not url and not ref:
        return task
    from skyd.models.task import WorkdirGit

    cur = task.workdir if isinstance(task.workdir, WorkdirGit) else None
    url = url or (cur.url if cur else None)
    if not url:
        raise InvalidSpecError("--git-ref needs --git-url (or a git workdir in the YAML)",
                               field="--git-ref", hint="add --git-url URL")
    for flag, v in (("--git-url", url), ("--git-ref", ref)):
        if v is not None and (not isinstance(v, str) or not v.strip() or v.startswith("-")):
            raise InvalidSpecError(f"{flag} {v!r} is not a repository URL or ref", field=flag)
    return task.model_copy(update={"workdir": WorkdirGit(url=url, ref=ref or (cur.ref if cur else None))})


TIER_KEYS = ("disk_tier", "network_tier")
TIER_HINTS = {"disk_tier": "one of low, medium, high, ultra, best",
              "network_tier": "one of standard, best"}


def tier_warnings(task: Any) -> list[str]:
    """disk_tier / network_tier other than the default: what skyd does with them (the
    provider's default disk and network are used; no provider here selects by tier)."""
    out = []
    for k in TIER_KEYS:
        vals = sorted({str(getattr(r, k, None)) for r in task.resources
                       if getattr(r, k, None) not in (None, "default", "standard")})
        if vals:
            out.append(f"resources.{k}: {', '.join(vals)} is not acted on by skyd's providers: "
                       "the provider's default disk/network is used")
    return out


async def aload_dag_from_payload(payload: dict[str, Any]) -> Any:
    """load_dag_from_payload in a worker thread: YAML parsing and validation are CPU work
    (and may read files next to the YAML), never done on the event loop."""
    return await anyio.to_thread.run_sync(
        lambda: load_dag_from_payload(payload, take=True))  # the check's DAG when kept


async def load_task_from_payload(payload: dict[str, Any]) -> Any:
    dag = await aload_dag_from_payload(payload)
    from skyd import config

    if getattr(dag, "policy_config", None) is not None:  # the admin policy's config from now on
        config.activate(dag.policy_config)
    if len(dag.tasks) == 1 and getattr(dag.tasks[0], "volumes", None):
        # volumes: {/path: PVC}: mounted through the kubernetes provider's pod_config
        config.activate(config.current().with_volumes(dict(dag.tasks[0].volumes)))
    if len(dag.tasks) != 1:
        raise InvalidSpecError(
            f"this YAML holds {len(dag.tasks)} tasks (a pipeline)",
            hint="run pipelines with `skyd jobs launch`",
        )
    return dag.tasks[0]  # overrides applied by load_dag_from_payload
