"""Task: what to run, where it may run (a list of candidate Resources), and with what data."""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from pydantic import ValidationError, ValidationInfo, field_validator, model_validator

from skyd.errors import InvalidSpecError
from skyd.models import parsing
from skyd.models._errors import convert_validation_error, fail
from skyd.models.accelerators import expand_accelerators
from skyd.models.expand import expand_resources
from skyd.models.redaction import REDACTED
from skyd.models.resources import Resources, SpecModel
from skyd.models.service import ServiceSpec
from skyd.models.storage import FileMount, resolve_local

MAX_NUM_NODES = 100_000  # bounds.BOUNDS["num_nodes"]; what an infra holds: at plan time
# SkyPilot's task-name rule (sky/task.py _VALID_NAME_REGEX), plus a length bound.
TASK_NAME_RE = re.compile(r"[a-zA-Z0-9]+(?:[._-]{1,2}[a-zA-Z0-9]+)*")
MAX_TASK_NAME_LEN = 128
TASK_NAME_RULE = ("letters, digits, '_', '.' and '-' (at most two separators in a row),"
                  f" starting and ending with a letter or digit, at most {MAX_TASK_NAME_LEN}"
                  " characters")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

TaskValidator = Callable[["Task"], list[str]]
_VALIDATORS: list[TaskValidator] = []


def register_task_validator(fn: TaskValidator) -> TaskValidator:
    """Add ``fn(task) -> list[str]`` (warnings) to what ``Task.validate()`` runs.

    Idempotent (registering the same function twice runs it once); usable as a decorator.
    """
    if fn not in _VALIDATORS:
        _VALIDATORS.append(fn)
    return fn


def registered_task_validators() -> list[TaskValidator]:
    return list(_VALIDATORS)


# What the loader learnt about a task that is not part of it, by task object: the warnings
# found while loading (duplicate YAML keys; Task.validate() returns them first, so every
# entry point that shows a task's warnings shows them) and the YAML's line map (so later
# checks -- skyd.models.precheck -- can name a line). Carried over by with_overrides.
_LOAD_NOTES: dict[int, tuple[list[str], Any]] = {}


def note_load(task: Task, msgs: list[str], lines: Any = None) -> None:
    if not msgs and not lines:
        return
    key = id(task)
    if key not in _LOAD_NOTES:
        weakref.finalize(task, _LOAD_NOTES.pop, key, None)
    _LOAD_NOTES[key] = (list(msgs), lines)


def load_warnings(task: Task) -> list[str]:
    return list(_LOAD_NOTES.get(id(task), ((), None))[0])


def load_lines(task: Task) -> Any:
    """The YAML line map of the task's document (field path -> line), or None."""
    return _LOAD_NOTES.get(id(task), ((), None))[1]


def str_scalars(v: Any, what: str, allow_none: bool) -> dict[str, str | None]:
    """envs/secrets: keys must be env names; numbers/bools become strings (as SkyPilot)."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        fail(f"{what} must be a mapping of NAME: value")
    out: dict[str, str | None] = {}
    for k, val in v.items():
        if not isinstance(k, str) or not ENV_NAME_RE.match(k):
            fail(f"{k!r} is not a valid variable name", "names match [A-Za-z_][A-Za-z0-9_]*",
                 sub=(str(k),))
        if val is None:
            if not allow_none:
                fail(f"{k} has no value", sub=(k,))
            out[k] = None
        elif isinstance(val, dict | list):
            fail(f"{k} must be a string, got {type(val).__name__}", sub=(k,))
        else:
            out[k] = str(val)
    return out


class WorkdirGit(SpecModel):
    _what: ClassVar[str] = "workdir"
    url: str
    ref: str | None = None


class Task(SpecModel):
    """A task. ``resources`` is the list of candidates (any of, or in order when
    ``resources_ordered``); a task always has at least one (possibly empty) candidate."""

    _what: ClassVar[str] = "task"
    _extra_keys: ClassVar[tuple[str, ...]] = ("_metadata",)

    name: str | None = None
    workdir: str | WorkdirGit | None = None
    num_nodes: int = 1
    setup: str | None = None
    run: str | None = None
    envs: dict[str, str | None] = {}
    secrets: dict[str, str | None] = {}
    managed_secrets: list[Any] | None = None
    file_mounts: dict[str, FileMount] = {}
    resources: list[Resources] = [Resources()]
    resources_ordered: bool = False
    service: ServiceSpec | None = None
    pool: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    inputs: dict[str, int | float] | None = None
    outputs: dict[str, int | float] | None = None
    event_callback: str | None = None
    estimated_runtime: int | float | None = None  # seconds
    volumes: dict[str, Any] | None = None
    volume_mounts: list[Any] | None = None
    file_mounts_mapping: dict[str, Any] | None = None
    api_server_access: bool | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _forms(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            fail(f"a task must be a mapping, got {type(data).__name__}")
        d = dict(data)
        if "_metadata" in d:
            d["metadata"] = d.pop("_metadata")
        if isinstance(d.get("secrets"), list):
            refs = d.pop("secrets")
            d["managed_secrets"] = list(d.get("managed_secrets") or []) + refs
        res = d.get("resources")
        if res is None:
            d.pop("resources", None)
        elif isinstance(res, dict):
            cands, ordered = expand_resources(res)
            d["resources"] = cands
            d.setdefault("resources_ordered", ordered)
        elif isinstance(res, list) and not res:
            fail("resources list is empty", sub=("resources",))
        return d

    @field_validator("pool", mode="before")
    @classmethod
    def _pool(cls, v: Any) -> Any:
        from skyd.models.service import PoolSpec

        return None if v is None else PoolSpec.model_validate(v).model_dump(exclude_none=True)

    @field_validator("envs", mode="before")
    @classmethod
    def _envs(cls, v: Any) -> Any:
        return str_scalars(v, "envs", allow_none=True)

    @field_validator("secrets", mode="before")
    @classmethod
    def _secrets(cls, v: Any) -> Any:
        return str_scalars(v, "secrets", allow_none=True)

    @field_validator("num_nodes", mode="before")
    @classmethod
    def _nodes(cls, v: Any) -> Any:
        from skyd import bounds

        if v is None:
            return 1
        if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 1 or (
                isinstance(v, float) and not v.is_integer()):
            fail(f"num_nodes must be an integer >= 1, got {bounds.show(v)}", "e.g. num_nodes: 2")
        if v > MAX_NUM_NODES:
            fail(f"num_nodes must be at most {MAX_NUM_NODES}, got {bounds.show(v)}",
                 "a cluster this big is a typo; the infra's own limit is checked at plan time")
        return int(v)

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None or not isinstance(v, str):
            return v
        unresolved = (info.context or {}).get("unresolved") or ()
        if any(f"${k}" in v or f"${{{k}" in v for k in unresolved):
            return v  # `validate` without a value for a variable it uses: checked at launch
        if not TASK_NAME_RE.fullmatch(v) or len(v) > MAX_TASK_NAME_LEN:
            fail(f"invalid task name {v[:60]!r}: {TASK_NAME_RULE}",
                 "e.g. name: train-resnet.v2")
        return v

    @field_validator("inputs", "outputs", mode="before")
    @classmethod
    def _io(cls, v: Any, info: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict) or len(v) > 1:
            fail(f"{info.field_name} takes at most one entry {{cloud_uri: size_gb}}")
        for k, size in v.items():
            if (isinstance(size, bool) or not isinstance(size, int | float)
                    or not 0 <= size <= parsing.MAX_SIZE_GIB):
                fail(f"size of {k!r} must be a number of GB >= 0, got {size!r}", sub=(str(k),))
        return v

    @field_validator("estimated_runtime", mode="before")
    @classmethod
    def _runtime(cls, v: Any) -> Any:
        if v is None:
            return None
        return parsing.parse_duration(v, default_unit="s", what="estimated_runtime")

    @field_validator("file_mounts", mode="before")
    @classmethod
    def _fm(cls, v: Any) -> Any:
        if v is None:
            return {}
        if not isinstance(v, dict):
            fail("file_mounts must be a mapping of remote path: source")
        for k in v:
            if not isinstance(k, str) or not k.strip():
                fail(f"bad file_mounts destination {k!r}", "use an absolute path or ~/...")
            if ".." in k.replace("\\", "/").split("/") or "\0" in k:
                # A destination is a path on the node, inside the node's filesystem view.
                fail(f"file_mounts destination {k!r} climbs out with '..'",
                     "write the path on the node without '..', e.g. /data/x or ~/x", sub=(k,))
        return v

    # ------------------------------------------------------------------ behaviour
    def validate(self) -> list[str]:  # type: ignore[override]
        """Run every registered validator; returns warnings (errors raise at load)."""
        out: list[str] = load_warnings(self)
        for fn in _VALIDATORS:
            out.extend(fn(self))
        return out

    def required_envs(self) -> list[str]:
        """Envs/secrets declared ``null`` and not supplied (only with allow_missing_env)."""
        return [k for k, v in {**self.envs, **self.secrets}.items() if v is None]

    def local_mounts(self) -> dict[str, str]:
        """The file mounts synced from this machine: destination -> local source."""
        return {d: str(fm.source) for d, fm in self.file_mounts.items() if fm.kind == "local"}

    def bucket_mounts(self) -> dict[str, Any]:
        """The file mounts backed by a bucket: destination -> its URI(s) or storage name."""
        return {d: fm.source or fm.name or "" for d, fm in self.file_mounts.items()
                if fm.kind != "local"}

    def autostop_setting(self) -> tuple[int, bool] | None:
        """(idle minutes, down) of the first resources entry that enables autostop."""
        for r in self.resources:
            a = r.autostop
            if a is not None and a.enabled:
                return int(a.idle_minutes), bool(a.down)
        return None

    def _rebuild(self, **updates: Any) -> Task:
        d = self.model_dump()
        d.update(updates)
        return Task.model_validate(d)

    def with_overrides(
        self, *, gpus: Any = None, cpus: Any = None, memory: Any = None, infra: str | None = None,
        instance_type: str | None = None, use_spot: bool | None = None,
        num_nodes: int | None = None, workdir: str | None = None, disk_size: Any = None,
        image_id: str | None = None, ports: Any = None, name: str | None = None,
        job_recovery: Any = None, base_dir: Path | None = None,
    ) -> Task:
        """CLI overrides (``--gpus``, ``--cpus``, ...) applied to every candidate.

        ``gpus`` replaces the accelerator set: candidates that differed only by accelerator
        collapse, then each is crossed with the new accelerator options (a list form makes
        the result ordered). Errors name the flag, e.g. ``--gpus``.
        """
        res_over = {k: v for k, v in (
            ("cpus", cpus), ("memory", memory), ("infra", infra),
            ("instance_type", instance_type), ("use_spot", use_spot),
            ("disk_size", disk_size), ("image_id", image_id), ("ports", ports),
            ("job_recovery", job_recovery)) if v is not None}
        for k, v in res_over.items():
            try:
                Resources.model_validate({k: v})
            except ValidationError as e:
                err = convert_validation_error(e)
                raise InvalidSpecError(err.message, field="--" + k.replace("_", "-"),
                                       hint=err.hint) from None
        cands = list(self.resources)
        ordered = self.resources_ordered
        if gpus is not None:
            opts, is_list = expand_accelerators(gpus, field="--gpus")
            bases: list[Resources] = []
            for c in cands:
                b = c.copy(accelerators=None)
                if b not in bases:
                    bases.append(b)
            cands = [b.copy(accelerators={n: cnt}) for n, cnt in opts for b in bases]
            ordered = is_list or (ordered and len(bases) > 1)
        new = []
        for c in cands:
            r = c.copy(**res_over) if res_over else c
            if r not in new:
                new.append(r)
        updates: dict[str, Any] = {"resources": new, "resources_ordered": ordered}
        if num_nodes is not None:
            updates["num_nodes"] = num_nodes
        if name is not None:
            updates["name"] = name
        if workdir is not None:
            updates["workdir"] = resolve_local(workdir, base_dir or Path(os.getcwd()))
        try:
            new_task = self._rebuild(**updates)
            note_load(new_task, load_warnings(self), load_lines(self))
            return new_task
        except ValidationError as e:
            err = convert_validation_error(e)
            field = err.field or ""
            flag = "--" + field.split(".")[0].replace("_", "-") if field else None
            raise InvalidSpecError(err.message, field=flag, hint=err.hint) from None

    # ------------------------------------------------------------------ normalized form
    def to_normalized(self, *, redact_secrets: bool = True) -> dict[str, Any]:
        """JSON-able dict. Secret values (and envs shadowed by a secret) are ``<redacted>``
        unless ``redact_secrets=False`` (what the daemon stores)."""
        def red(v: str | None) -> str | None:
            return REDACTED if (redact_secrets and v is not None) else v

        envs = {k: (red(v) if k in self.secrets else v) for k, v in self.envs.items()}
        d: dict[str, Any] = {
            "name": self.name,
            "num_nodes": self.num_nodes,
            "workdir": (self.workdir.model_dump(mode="json")
                        if isinstance(self.workdir, WorkdirGit) else self.workdir),
            "setup": self.setup,
            "run": self.run,
            "envs": envs,
            "secrets": {k: red(v) for k, v in self.secrets.items()},
            "file_mounts": {k: v.to_normalized() for k, v in self.file_mounts.items()},
            "service": self.service.model_dump(mode="json") if self.service else None,
            "resources": [r.to_normalized() for r in self.resources],
            "resources_ordered": self.resources_ordered,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "config": self.config,
            "event_callback": self.event_callback,
        }
        for k in ("estimated_runtime", "pool", "volumes", "volume_mounts",
                  "file_mounts_mapping", "api_server_access", "managed_secrets", "metadata"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        return d

    @classmethod
    def from_normalized(cls, d: dict[str, Any]) -> Task:
        try:
            return cls.model_validate(d)
        except ValidationError as e:
            raise convert_validation_error(e) from None


# The shipped validator registers itself on import; every Task has it (it needs Task).
from skyd.models import vendor_check as _vendor_check  # noqa: E402,F401
