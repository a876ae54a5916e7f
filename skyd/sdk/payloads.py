"""Request bodies of the daemon's verbs, shared by the CLI and both SDKs (stdlib only).

A task is sent as its YAML text plus the directory it came from, so relative paths in it
resolve the way the user wrote them; the daemon parses it with the same code `validate`
uses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from skyd import settings
from skyd.errors import InvalidSpecError

OVERRIDES = ("gpus", "cpus", "memory", "infra", "instance_type", "num_nodes", "use_spot",
             "disk_size", "disk_tier", "network_tier", "image_id", "ports", "name",
             "workdir", "git_url", "git_ref")  # fmt: skip


def task_source(task: str | os.PathLike[str] | None = None, *, command: str | None = None,
                yaml_text: str | None = None, base_dir: str | None = None) -> dict[str, Any]:
    """What to run: a task YAML path, YAML text, or an inline command (`sky launch 'cmd'`)."""
    if yaml_text is not None:
        return {"yaml": yaml_text, "base_dir": base_dir or os.getcwd()}
    if task is not None:
        path = Path(task).expanduser().resolve()
        text = read_task_file(path, str(task))
        return {"yaml": text, "yaml_path": str(path), "base_dir": base_dir or str(path.parent)}
    if command:
        return {"command": command, "base_dir": base_dir or os.getcwd()}
    raise InvalidSpecError("nothing to run", hint="give a task YAML path, YAML text or a command")


MAX_TASK_FILE_BYTES = 1 << 20  # skyd.models.loader.MAX_YAML_BYTES: refused before sending


def read_task_file(path: Path, shown: str) -> str:
    """A task YAML's text: UTF-8, at most MAX_TASK_FILE_BYTES (InvalidSpecError otherwise)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TASK_FILE_BYTES + 1)
    except OSError as e:
        raise InvalidSpecError(f"cannot read {shown}: {e.strerror}",
                               hint="check the path of the task YAML") from None
    if len(data) > MAX_TASK_FILE_BYTES:
        raise InvalidSpecError(f"{shown} is larger than {MAX_TASK_FILE_BYTES // 1024} KiB",
                               hint="a task YAML this big is not a task; keep data in files")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidSpecError(f"{shown} is not UTF-8 text (bad byte at offset {e.start})",
                               hint="save the file as UTF-8") from None


def job_name(name: str | None) -> str | None:
    """A managed job's name (``jobs launch -n``), checked by the naming rule."""
    from skyd.names import check_optional_name

    return check_optional_name(name, kind="managed job", field="name")


def overrides(**kw: Any) -> dict[str, Any]:
    """CLI-style resource overrides (--gpus, --infra, ...); None values are left out."""
    unknown = set(kw) - set(OVERRIDES)
    if unknown:
        raise InvalidSpecError(f"unknown override(s): {', '.join(sorted(unknown))}",
                               hint="known: " + ", ".join(OVERRIDES))
    out = {k: v for k, v in kw.items() if v is not None}
    if out.get("workdir"):
        out["workdir"] = os.path.abspath(str(out["workdir"]))
    return out


_SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def resolve_secrets(secrets: Mapping[str, str | None] | None = None,
                    secret_files: Iterable[str | os.PathLike[str]] = ()) -> dict[str, str]:
    """``--secret-file`` files (dotenv), then ``--secret KEY[=VAL]`` values on top. A None
    value (``--secret KEY``) is taken from the caller's environment, as SkyPilot does."""
    out: dict[str, str] = {}
    for f in secret_files:
        out.update(read_secret_file(f))
    for k, v in (secrets or {}).items():
        if not isinstance(k, str) or not _SECRET_NAME.match(k):
            raise InvalidSpecError(f"--secret {str(k)[:64]!r}: not a valid variable name",
                                   field="--secret", hint="names match [A-Za-z_][A-Za-z0-9_]*")
        if v is None:
            if k not in os.environ:
                raise InvalidSpecError(f"--secret {k}: {k} is not set in your environment",
                                       field="--secret",
                                       hint=f"export {k} first, or pass --secret {k}=VALUE")
            v = os.environ[k]
        out[k] = str(v)
    return out


def read_secret_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """A dotenv file of secrets; errors name the line, never its text."""
    from skyd.models.envsubst import parse_env_file

    try:
        return parse_env_file(path)
    except InvalidSpecError as e:
        msg = (f"bad line in secret file {str(path)!r}" if e.line
               else f"cannot read secret file {str(path)!r}")
        raise InvalidSpecError(msg, field="--secret-file", line=e.line,
                               hint="each line is KEY=VALUE" if e.line else "check the path"
                               ) from None


def launch_payload(source: dict[str, Any], *, cluster_name: str | None = None,
                   env: dict[str, str] | None = None,
                   secrets: Mapping[str, str | None] | None = None, dryrun: bool = False,
                   detach_run: bool = False, idle_minutes: float | None = None,
                   down: bool = False, no_setup: bool = False, retry_until_up: bool = False,
                   minimize: str = "cost", config: list[str] | None = None,
                   **resource_overrides: Any) -> dict[str, Any]:
    from skyd.names import check_optional_name

    cluster_name = check_optional_name(cluster_name, kind="cluster", field="cluster_name")
    return {**source, "cluster_name": cluster_name, "env": env or {},
            "secrets": resolve_secrets(secrets), "dryrun": dryrun, "detach_run": detach_run, "idle_minutes": idle_minutes, "down": down,
            "no_setup": no_setup, "retry_until_up": retry_until_up, "minimize": minimize,
            "overrides": overrides(**resource_overrides),
            "catalog_dir": catalog_dir(), "config": config_sources(config)}  # fmt: skip


def config_sources(cli: list[str] | None = None, cwd: str | None = None) -> dict[str, Any]:
    """Where this caller's config comes from (SkyPilot's layers: $SKYPILOT_CONFIG or the
    user file, the project's .sky.yaml in cwd, ``--config`` items): the daemon reads them
    once per request (skyd.config)."""
    from skyd.config.layers import caller_sources

    return caller_sources(list(cli or []), cwd=cwd or os.getcwd()).to_json()


def catalog_dir() -> str | None:
    """The caller's SKYD_CATALOG_DIR, sent with each request: a running daemon plans with
    the catalogs of the shell that asks, not of the one that started it."""
    d = settings.CATALOG_DIR.get()
    return os.path.abspath(d) if d is not None else None


def exec_payload(source: dict[str, Any], *, cluster_name: str,
                 env: dict[str, str] | None = None,
                 secrets: Mapping[str, str | None] | None = None, detach_run: bool = False,
                 config: list[str] | None = None, **resource_overrides: Any) -> dict[str, Any]:
    return {**source, "cluster_name": cluster_name, "env": env or {},
            "secrets": resolve_secrets(secrets),
            "detach_run": detach_run, "overrides": overrides(**resource_overrides),
            "config": config_sources(config)}  # fmt: skip


def jobs_launch_payload(source: dict[str, Any], *, name: str | None = None,
                        env: dict[str, str] | None = None,
                        secrets: Mapping[str, str | None] | None = None,
                        job_recovery: str | None = None, retry_until_up: bool = False,
                        priority: int = 0, config: list[str] | None = None) -> dict[str, Any]:
    return {**source, "name": job_name(name), "env": env or {},
            "secrets": resolve_secrets(secrets),
            "job_recovery": job_recovery, "retry_until_up": retry_until_up,
            "priority": priority, "catalog_dir": catalog_dir(),
            "config": config_sources(config)}  # fmt: skip


def clusters_payload(clusters: list[str] | str | None, all_clusters: bool = False) -> dict[str, Any]:
    names = [clusters] if isinstance(clusters, str) else list(clusters or [])
    return {"clusters": names, "all": all_clusters}
