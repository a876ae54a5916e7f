"""Request bodies of the daemon's verbs, shared by the CLI and both SDKs (stdlib only).

A task is sent as its YAML text plus the directory it came from, so relative paths in it
resolve the way the user wrote them; the daemon parses it with the same code `validate`
uses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from skyd.errors import InvalidSpecError

OVERRIDES = ("gpus", "cpus", "memory", "infra", "instance_type", "num_nodes", "use_spot",
             "disk_size", "image_id", "ports", "name", "workdir")  # fmt: skip


def task_source(task: str | os.PathLike[str] | None = None, *, command: str | None = None,
                yaml_text: str | None = None, base_dir: str | None = None) -> dict[str, Any]:
    """What to run: a task YAML path, YAML text, or an inline command (`sky launch 'cmd'`)."""
    if yaml_text is not None:
        return {"yaml": yaml_text, "base_dir": base_dir or os.getcwd()}
    if task is not None:
        path = Path(task).expanduser().resolve()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise InvalidSpecError(f"cannot read {task}: {e.strerror}",
                                   hint="check the path of the task YAML") from None
        return {"yaml": text, "yaml_path": str(path), "base_dir": base_dir or str(path.parent)}
    if command:
        return {"command": command, "base_dir": base_dir or os.getcwd()}
    raise InvalidSpecError("nothing to run", hint="give a task YAML path, YAML text or a command")


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


def launch_payload(source: dict[str, Any], *, cluster_name: str | None = None,
                   env: dict[str, str] | None = None, dryrun: bool = False,
                   detach_run: bool = False, idle_minutes: float | None = None,
                   down: bool = False, no_setup: bool = False, retry_until_up: bool = False,
                   minimize: str = "cost", **resource_overrides: Any) -> dict[str, Any]:
    return {**source, "cluster_name": cluster_name, "env": env or {}, "dryrun": dryrun,
            "detach_run": detach_run, "idle_minutes": idle_minutes, "down": down,
            "no_setup": no_setup, "retry_until_up": retry_until_up, "minimize": minimize,
            "overrides": overrides(**resource_overrides),
            "catalog_dir": catalog_dir()}  # fmt: skip


def catalog_dir() -> str | None:
    """The caller's SKYD_CATALOG_DIR, sent with each request: a running daemon plans with
    the catalogs of the shell that asks, not of the one that started it."""
    d = os.environ.get("SKYD_CATALOG_DIR") or None
    return os.path.abspath(d) if d else None


def exec_payload(source: dict[str, Any], *, cluster_name: str,
                 env: dict[str, str] | None = None, detach_run: bool = False,
                 **resource_overrides: Any) -> dict[str, Any]:
    return {**source, "cluster_name": cluster_name, "env": env or {},
            "detach_run": detach_run, "overrides": overrides(**resource_overrides)}  # fmt: skip


def clusters_payload(clusters: list[str] | str | None, all_clusters: bool = False) -> dict[str, Any]:
    names = [clusters] if isinstance(clusters, str) else list(clusters or [])
    return {"clusters": names, "all": all_clusters}
