"""The launch's own precheck: everything launch refuses about a task that needs no
credentials and no network, checked before anything is created.

One set of checks for every entry point: ``skyd validate`` (CLI and ``POST /v1/validate``)
runs it after loading, and so does the daemon's submit check of every verb that takes a
task (launch, exec, jobs launch, serve up/update, jobs pool apply -- CLI, SDK and HTTP API
alike, through ``skyd.pipeline.taskload.load_dag_from_payload``); a request's handler takes
the DAG its check passed (skyd.pipeline.parsememo) or, resumed or changed, runs it again;
launch checks its local paths again before provisioning. What needs credentials (a source bucket exists, the cloud accepts the
image) stays with launch's preflight.

Checked: a local workdir (exists, is a directory; a git workdir is cloned at launch, see
skyd.pipeline.gitworkdir), every local file-mount source (exists), every bucket mount (URI scheme,
store, bucket-name rules, store vs source, a local source has a bucket name and exists).
Every mistake of the DAG is reported at once, each naming its field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from skyd.errors import InvalidSpecError
from skyd.models import buckets
from skyd.models._errors import combine


def _unresolved(value: str, names: Iterable[str]) -> bool:
    """Whether ``value`` still holds a reference to one of ``names`` (a variable that
    `validate` was not given): such a path is checked at launch, when it has a value."""
    return any(re.search(r"\$\{?" + re.escape(n) + r"\b", value) for n in names)


def _path_problem(path: str, *, want_dir: bool) -> str | None:
    p = os.path.expanduser(path)
    if not os.path.lexists(p):
        return "does not exist"
    if want_dir and not os.path.isdir(p):
        return "is a file, not a directory"
    if not os.path.exists(p):
        return "is a broken symbolic link"
    return None


def task_problems(task: Any, prefix: str = "", base_dir: str | None = None
                  ) -> list[InvalidSpecError]:
    """Every precheck mistake of one task (``prefix``: e.g. ``tasks[1].``; ``base_dir``:
    where relative paths the loader keeps as written -- service TLS files -- resolve)."""
    from skyd.models._errors import line_for
    from skyd.models.task import load_lines

    unresolved = list(task.required_envs())
    errors: list[InvalidSpecError] = []
    lines = load_lines(task)

    def line(field: str) -> int | None:
        """The YAML line of ``file_mounts./d.name``-like fields (destinations hold dots
        and slashes: matched against the task's own destinations)."""
        head, _, rest = field.partition(".")
        if head == "file_mounts":
            for dst in task.file_mounts or {}:
                if rest == dst or rest.startswith(dst + "."):
                    sub = rest[len(dst) + 1:]
                    return line_for(("file_mounts", dst, *([sub] if sub else [])), lines)
        return line_for(tuple(field.split(".")), lines)

    def err(field: str, msg: str, hint: str) -> None:
        errors.append(InvalidSpecError(msg, field=prefix + field, hint=hint,
                                       line=line(field)))

    wd = task.workdir
    if isinstance(wd, str) and wd and not _unresolved(wd, unresolved):
        why = _path_problem(wd, want_dir=True)
        if why is not None:
            err("workdir", f"workdir {wd[:200]!r} {why}",
                "fix the path (relative paths are relative to the task YAML)")
    for dst, fm in (task.file_mounts or {}).items():
        field = f"file_mounts.{dst}"
        kind = getattr(fm, "kind", "local")
        src = fm.source
        if kind == "local":
            if isinstance(src, str) and not _unresolved(src, unresolved):
                why = _path_problem(src, want_dir=False)
                if why is not None:
                    err(field, f"local source {src[:200]!r} {why}",
                        "fix the path (relative paths are relative to the task YAML)")
            continue
        if isinstance(src, str) and _unresolved(src, unresolved):
            continue
        try:
            m = buckets.plan_one(dst, fm)
        except InvalidSpecError as e:
            e.line = line(e.field or field)
            e.field = prefix + (e.field or field)
            errors.append(e)
            continue
        if m is not None and m.local_source is not None:
            why = _path_problem(m.local_source, want_dir=False)
            if why is not None:
                err(f"{field}.source", f"local source {m.local_source[:200]!r} {why}",
                    "fix the path (relative paths are relative to the task YAML)")
    tls = getattr(getattr(task, "service", None), "tls", None)
    for key in ("keyfile", "certfile") if tls is not None else ():
        path = str(getattr(tls, key))
        if _unresolved(path, unresolved):
            continue
        full = os.path.expanduser(path)
        if not os.path.isabs(full) and base_dir is not None:
            full = os.path.join(base_dir, full)
        if os.path.isabs(full) and not os.path.isfile(full):
            err(f"service.tls.{key}", f"service.tls.{key} {path[:200]!r}: no such file",
                "give the path of a PEM file")
    return errors


def dag_problems(dag: Any, base_dir: str | None = None) -> list[InvalidSpecError]:
    tasks = list(getattr(dag, "tasks", None) or [dag])
    multi = len(tasks) > 1
    out: list[InvalidSpecError] = []
    for i, t in enumerate(tasks):
        out.extend(task_problems(t, f"tasks[{i}]." if multi else "", base_dir))
    return out


def precheck(dag: Any, base_dir: str | os.PathLike[str] | None = None) -> None:
    """Raise every precheck mistake of ``dag`` (a Dag or one Task) at once: one
    InvalidSpecError, or InvalidSpecErrors (exit 2, HTTP 400). ``base_dir``: the directory
    of the task YAML."""
    errors = dag_problems(dag, None if base_dir is None else str(base_dir))
    if errors:
        raise combine(errors)
