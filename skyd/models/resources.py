"""Resources (one launch candidate), JobRecovery, Autostop."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from skyd.errors import InvalidSpecError
from skyd.models import parsing
from skyd.models._errors import check_bounds, check_keys, convert_validation_error, fail
from skyd.models.accelerators import Count, expand_accelerators

DEFAULT_DISK_SIZE_GB = 256
DEFAULT_AUTOSTOP_IDLE_MINUTES = 5
MIN_PRIORITY, MAX_PRIORITY = -1000, 1000  # skyd.bounds.BOUNDS["priority"]
DISK_TIERS = ("low", "medium", "high", "ultra", "best")
NETWORK_TIERS = ("standard", "best")
WAIT_FOR = ("jobs_and_ssh", "jobs", "none")
# SkyPilot's RESOURCE_CONFIG_ALIASES: alias -> the field it stands for.
RESOURCE_ALIASES: dict[str, str] = {"gpus": "accelerators"}
# Left out of the normalized form when unset (the rest is always present).
_OPTIONAL_KEYS = ("accelerator_args", "priority_class", "max_hourly_cost", "local_disk",
                  "volumes", "internal")


@contextmanager
def _at(key: str) -> Iterator[None]:
    """Re-anchor a ``fail()`` from a helper at sub-field ``key``."""
    try:
        yield
    except PydanticCustomError as e:
        ctx = e.context or {}
        if ctx.get("sub"):
            raise
        fail(str(ctx.get("msg")), ctx.get("hint"), sub=(key,))


class SpecModel(BaseModel):
    """Base: immutable, unknown keys rejected with a suggestion."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    _extra_keys: ClassVar[tuple[str, ...]] = ()
    _what: ClassVar[str] = "spec"
    # field -> key of skyd.bounds.BOUNDS: checked (and a whole float made an int)
    # before any other validation, so every number is bounded by the one table.
    _bounds: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            check_keys(data, list(cls.model_fields) + list(cls._extra_keys), cls._what)
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _bounded(cls, v: Any, info: ValidationInfo) -> Any:
        """A field named in ``_bounds``: checked per field, so every bad number of a
        mapping is reported at once."""
        key = cls._bounds.get(info.field_name or "")
        if key is None or v is None:
            return v
        return check_bounds({info.field_name: v}, {str(info.field_name): key},
                            at_field=True)[info.field_name]


class JobRecovery(SpecModel):
    """Managed-job recovery: strategy name (upper-cased), restarts on user errors."""

    _what: ClassVar[str] = "job_recovery"
    _bounds: ClassVar[dict[str, str]] = {"max_restarts_on_errors": "max_restarts_on_errors"}
    strategy: str | None = None
    max_restarts_on_errors: int = 0
    recover_on_exit_codes: list[int] = []

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"strategy": data}
        if data is not None and not isinstance(data, dict):
            fail("job_recovery must be a strategy name or a mapping",
                 "e.g. job_recovery: EAGER_NEXT_REGION or {max_restarts_on_errors: 3}")
        return data

    @field_validator("strategy", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = v.strip().upper()
            return v or None
        return v

    @field_validator("recover_on_exit_codes", mode="before")
    @classmethod
    def _codes(cls, v: Any) -> Any:
        if v is None:
            return []
        items = v if isinstance(v, list) else [v]
        out: list[int] = []
        for c in items:
            if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= 255:
                fail(f"exit codes are integers 0-255, got {c!r}")
            if c not in out:
                out.append(c)
        return out


class Autostop(SpecModel):
    """Stop (or tear down) a cluster after it has been idle for ``idle_minutes``."""

    _what: ClassVar[str] = "autostop"
    _bounds: ClassVar[dict[str, str]] = {"hook_timeout": "hook_timeout"}
    enabled: bool = True
    idle_minutes: int = DEFAULT_AUTOSTOP_IDLE_MINUTES
    down: bool = False
    wait_for: Literal["jobs_and_ssh", "jobs", "none"] = "jobs_and_ssh"
    hook: str | None = None
    hook_timeout: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _forms(cls, data: Any) -> Any:
        if isinstance(data, bool):
            return {"enabled": data}
        if isinstance(data, int | float | str):
            secs = parsing.parse_duration(data, default_unit="m", what="autostop")
            return {"enabled": True, "idle_minutes": int(round(secs / 60))}
        if isinstance(data, dict):
            d = dict(data)
            if isinstance(d.get("wait_for"), str):
                d["wait_for"] = d["wait_for"].strip().lower()
                if d["wait_for"] not in WAIT_FOR:
                    fail(f"bad wait_for {data['wait_for']!r}", f"one of {', '.join(WAIT_FOR)}",
                         sub=("wait_for",))
            if "idle_minutes" in d:
                im = d["idle_minutes"]
                if isinstance(im, bool):
                    fail(f"idle_minutes must be a number of minutes, got {im!r}",
                         "e.g. idle_minutes: 30 (or autostop: false to turn it off)",
                         sub=("idle_minutes",))
                if isinstance(im, float) and im.is_integer():
                    im = int(im)
                if isinstance(im, str):
                    with _at("idle_minutes"):
                        im = int(round(parsing.parse_duration(im, default_unit="m",
                                                              what="idle_minutes") / 60))
                if not isinstance(im, int) or not 0 <= im <= parsing.MAX_DURATION_S // 60:
                    fail(f"idle_minutes must be an integer in 0..{parsing.MAX_DURATION_S // 60},"
                         f" got {im!r}", sub=("idle_minutes",))
                d["idle_minutes"] = im
            return d
        fail("autostop must be true/false, minutes, a duration like '5h', or a mapping")


_DOCKER_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")


def _check_docker(value: str, sub: tuple[str, ...] = ()) -> None:
    """``docker:<image>``: a non-empty image reference (what docker/podman accept)."""
    if not value.startswith("docker:"):
        return
    img = value[len("docker:"):].strip()
    if not img:
        fail("'docker:' needs an image name", "e.g. image_id: docker:ubuntu:22.04", sub=sub)
    if not _DOCKER_REF.match(img) or "//" in img or img.endswith((":", "/", "@")):
        fail(f"{img!r} is not a container image reference",
             "use docker:[registry/]name[:tag][@sha256:digest], e.g. docker:rocm/pytorch:latest", sub=sub)


def _as_docker(image: str) -> str:
    return image if image.startswith("docker:") else f"docker:{image}"


class Resources(SpecModel):
    """One launch candidate. Immutable; ``copy(**overrides)`` re-validates.

    Accepts SkyPilot's YAML forms (``infra:`` strings, ``cpus: 4+``, ``disk_size: 100GB``,
    ``ports: 8080``, ``accelerators: A100:8``, every ``autostop`` form, ...) and normalizes
    them. ``accelerators`` holds at most one entry; sets and lists are split into several
    candidates by :func:`expand_resources`.
    """

    _what: ClassVar[str] = "resources"
    _bounds: ClassVar[dict[str, str]] = {"priority": "priority",
                                         "max_hourly_cost": "max_hourly_cost"}
    _extra_keys: ClassVar[tuple[str, ...]] = (
        "infra", "ephemeral_storage", "_no_missing_accel_warnings", "_docker_login_config",
        "_is_image_managed", "_requires_fuse", "_cluster_config_overrides",
    )

    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    cpus: str | None = None
    memory: str | None = None
    accelerators: dict[str, Count] | None = None
    accelerator_args: dict[str, Any] | None = None
    use_spot: bool = False
    job_recovery: JobRecovery | None = None
    disk_size: int = DEFAULT_DISK_SIZE_GB
    disk_tier: Literal["low", "medium", "high", "ultra", "best"] | None = None
    network_tier: Literal["standard", "best"] | None = None
    ports: list[str] | None = None
    image_id: str | dict[str, str] | None = None
    labels: dict[str, str] | None = None
    autostop: Autostop | None = None
    priority: int | None = None
    priority_class: str | None = None
    max_hourly_cost: float | None = None
    local_disk: str | None = None
    volumes: list[dict[str, Any]] | None = None
    internal: dict[str, Any] | None = None  # SkyPilot's `_`-prefixed internal fields

    # ------------------------------------------------------------------ input forms
    @model_validator(mode="before")
    @classmethod
    def _location(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            if data is None:
                return {}
            fail(f"resources must be a mapping, got {type(data).__name__}")
        d = dict(data)
        for alias, field in RESOURCE_ALIASES.items():
            if alias in d:
                if d.get(field) is not None and d[alias] is not None:
                    fail(f"'{alias}' and '{field}' are the same field; give one",
                         f"drop '{alias}:' (it is an alias of '{field}:')", sub=(alias,))
                val = d.pop(alias)
                if d.get(field) is None:
                    d[field] = val
        internal = {k: d.pop(k) for k in list(d) if k.startswith("_") and k != "_what"}
        if internal:
            d["internal"] = {**(d.get("internal") or {}), **internal}
        if "ephemeral_storage" in d:
            eph = d.pop("ephemeral_storage")
            d.setdefault("disk_size", eph)
        if isinstance(d.get("cloud"), str):
            with _at("cloud"):
                d["cloud"] = parsing.canonical_cloud(d["cloud"])
        infra = d.pop("infra", None)
        if infra is not None:
            with _at("infra"):
                cloud, region, zone = parsing.parse_infra(infra)
            for key, val in (("cloud", cloud), ("region", region), ("zone", zone)):
                given = d.get(key)
                if given is not None and val is not None and given != val:
                    fail(f"infra '{infra}' conflicts with {key}: '{given}'",
                         f"drop the legacy '{key}:' key or make it match infra", sub=(key,))
                if val is not None:
                    d[key] = val
        img = d.get("image_id")
        if d.get("cloud") == "kubernetes" and img is not None:
            # On Kubernetes every image is a container image (SkyPilot adds 'docker:').
            if isinstance(img, str):
                d["image_id"] = _as_docker(img)
            elif isinstance(img, dict):
                # (the `docker` key names a container image already)
                d["image_id"] = {k: _as_docker(v) if isinstance(v, str) and k != "docker"
                                 else v for k, v in img.items()}
        return d

    @field_validator("cpus", mode="before")
    @classmethod
    def _cpus(cls, v: Any) -> Any:
        return None if v is None else parsing.parse_cpus(v)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> Any:
        return None if v is None else parsing.parse_memory(v)

    @field_validator("accelerators", mode="before")
    @classmethod
    def _accels(cls, v: Any) -> Any:
        if v is None:
            return None
        try:
            opts, _ = expand_accelerators(v)
        except InvalidSpecError as e:
            fail(e.message, e.hint)
        if len(opts) != 1:
            fail(f"one Resources holds one accelerator type, got {len(opts)}",
                 "sets and lists of accelerators become several candidates when loaded "
                 "from a task; build one Resources per accelerator")
        return {opts[0][0]: opts[0][1]}

    @field_validator("disk_size", mode="before")
    @classmethod
    def _disk(cls, v: Any) -> Any:
        return DEFAULT_DISK_SIZE_GB if v is None else parsing.parse_disk_size(v)

    @field_validator("use_spot", mode="before")
    @classmethod
    def _spot(cls, v: Any) -> Any:
        if v is None:
            return False
        if not isinstance(v, bool):
            fail(f"use_spot must be true or false, got {v!r}")
        return v

    @field_validator("disk_tier", "network_tier", mode="before")
    @classmethod
    def _tier(cls, v: Any, info: Any) -> Any:
        if v is None:
            return None
        choices = DISK_TIERS if info.field_name == "disk_tier" else NETWORK_TIERS
        s = str(v).strip().lower()
        if s not in choices:
            fail(f"bad {info.field_name} {v!r}", f"one of {', '.join(choices)}")
        return s

    @field_validator("ports", mode="before")
    @classmethod
    def _ports(cls, v: Any) -> Any:
        return parsing.parse_ports(v)

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            fail("labels must be a mapping of strings")
        out = {}
        for k, val in v.items():
            if isinstance(val, dict | list) or val is None:
                fail(f"label {k!r} must be a string, got {val!r}", sub=(str(k),))
            out[str(k)] = str(val).lower() if isinstance(val, bool) else str(val)
        return out

    @field_validator("image_id", mode="before")
    @classmethod
    def _image(cls, v: Any) -> Any:
        if isinstance(v, dict):
            v = {str(k): str(val) for k, val in v.items()}
            for k, val in v.items():
                _check_docker(val if k != "docker" else f"docker:{val.removeprefix('docker:')}",
                              sub=(k,))
            return v
        if v is not None and not isinstance(v, str):
            fail(f"image_id must be a string or a mapping, got {v!r}")
        if v is not None:
            _check_docker(v)
        return v

    @model_validator(mode="after")
    def _checks(self) -> Resources:
        if self.zone is not None and self.region is None and self.cloud in ("kubernetes", "ssh"):
            fail(f"{self.cloud} has no zones")
        return self

    # ------------------------------------------------------------------ API
    def copy(self, **overrides: Any) -> Resources:  # type: ignore[override]
        """A new Resources with ``overrides`` applied (validated like YAML input).

        Passing ``infra=`` replaces cloud/region/zone together.
        """
        base = self.model_dump()
        if "infra" in overrides:
            for k in ("cloud", "region", "zone"):
                base.pop(k, None)
        base.update(overrides)
        try:
            return Resources.model_validate(base)
        except ValidationError as e:
            raise convert_validation_error(e) from None

    @property
    def infra(self) -> str | None:
        """``cloud/region/zone`` (``*`` for an unset part), or None when unconstrained."""
        return parsing.format_infra(self.cloud, self.region, self.zone)

    @property
    def accelerator(self) -> tuple[str, Count] | None:
        """The (name, count) pair, or None for a CPU-only candidate."""
        if not self.accelerators:
            return None
        name, count = next(iter(self.accelerators.items()))
        return name, count

    @property
    def docker_image(self) -> str | None:
        """``docker:<img>`` image_id (or its ``docker:`` key) -> ``<img>``; None for VM
        images."""
        if isinstance(self.image_id, dict) and isinstance(self.image_id.get("docker"), str):
            img = self.image_id["docker"].strip()
            return img[len("docker:"):] if img.startswith("docker:") else img
        vals = [self.image_id] if isinstance(self.image_id, str) else list(
            (self.image_id or {}).values())
        imgs = {v[len("docker:"):] for v in vals if v.startswith("docker:")}
        if len(imgs) == 1 and len(vals) and all(v.startswith("docker:") for v in vals):
            return imgs.pop()
        return None

    def to_normalized(self) -> dict[str, Any]:
        d = self.model_dump(mode="json")
        for k in _OPTIONAL_KEYS:
            if d.get(k) is None:
                d.pop(k, None)
        return {"infra": self.infra, **d}

    @classmethod
    def from_normalized(cls, d: dict[str, Any]) -> Resources:
        return cls.model_validate(d)
