"""``service:`` section (SkyServe-compatible)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import model_validator
from pydantic_core import PydanticCustomError

from skyd import bounds
from skyd.models._errors import check_bounds, fail
from skyd.models.resources import SpecModel

DEFAULT_INITIAL_DELAY_SECONDS = 1200
DEFAULT_PROBE_TIMEOUT_SECONDS = 15
DEFAULT_UPSCALE_DELAY_SECONDS = 300
DEFAULT_DOWNSCALE_DELAY_SECONDS = 1200
LB_POLICIES = ("round_robin", "least_load", "instance_aware_least_load", "affinity")
DEFAULT_LB_POLICY = "least_load"


class ReadinessProbe(SpecModel):
    _what: ClassVar[str] = "readiness_probe"
    _bounds: ClassVar[dict[str, str]] = {
        "initial_delay_seconds": "initial_delay_seconds",
        "timeout_seconds": "probe_timeout_seconds",
        "endpoint_probe_interval_seconds": "probe_interval_seconds",
        "consecutive_failure_threshold_timeout": "failure_timeout_seconds",
    }
    path: str = "/"
    initial_delay_seconds: int | float = DEFAULT_INITIAL_DELAY_SECONDS
    timeout_seconds: int | float = DEFAULT_PROBE_TIMEOUT_SECONDS
    endpoint_probe_interval_seconds: int | float | None = None
    consecutive_failure_threshold_timeout: int | float | None = None
    post_data: str | dict[str, Any] | None = None
    headers: dict[str, str] | None = None

    @model_validator(mode="before")
    @classmethod
    def _forms(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {"path": data}
        if not isinstance(data, dict):
            fail("readiness_probe must be a path or a mapping", "e.g. readiness_probe: /health")
        p = data.get("path")
        if isinstance(p, str) and not p.startswith("/"):
            fail(f"readiness_probe path must start with '/', got {p!r}", f"write '/{p}'",
                 sub=("path",))
        return data


class ReplicaPolicy(SpecModel):
    _what: ClassVar[str] = "replica_policy"
    _bounds: ClassVar[dict[str, str]] = {
        "min_replicas": "replicas", "max_replicas": "replicas",
        "num_overprovision": "replicas", "base_ondemand_fallback_replicas": "replicas",
        "target_queue_length_per_replica": "target_queue_length_per_replica",
        "upscale_delay_seconds": "scale_delay_seconds",
        "downscale_delay_seconds": "scale_delay_seconds",
    }
    min_replicas: int = 1
    max_replicas: int | None = None
    target_qps_per_replica: int | float | dict[str, int | float] | None = None
    num_overprovision: int | None = None
    # skyd's queue_length autoscaler: requests in flight per replica (instead of a QPS target)
    target_queue_length_per_replica: int | float | None = None
    dynamic_ondemand_fallback: bool | None = None
    base_ondemand_fallback_replicas: int | None = None
    spot_placer: str | None = None
    upscale_delay_seconds: int | float = DEFAULT_UPSCALE_DELAY_SECONDS
    downscale_delay_seconds: int | float = DEFAULT_DOWNSCALE_DELAY_SECONDS

    @model_validator(mode="before")
    @classmethod
    def _per_accelerator(cls, data: Any) -> Any:
        """target_qps_per_replica: a number, or {ACCELERATOR[:COUNT]: qps} with known names;
        each qps within the bounds table."""
        from skyd.models.accelerators import lookup_accelerator, suggest_accelerators

        if not isinstance(data, dict):
            fail("replica_policy must be a mapping", "e.g. {min_replicas: 1, max_replicas: 3,"
                 " target_qps_per_replica: 2.5}")
        tq = data.get("target_qps_per_replica")
        if tq is None:
            return data
        if not isinstance(tq, dict):
            why = bounds.problem(tq, "target_qps_per_replica")
            if why is not None:
                fail(f"target_qps_per_replica {why}", bounds.hint("target_qps_per_replica"),
                     sub=("target_qps_per_replica",))
            return data
        sub = ("target_qps_per_replica",)
        if not tq:
            fail("target_qps_per_replica is an empty mapping",
                 "give a number, or {ACCELERATOR: qps} e.g. {A100: 10, H100: 20}", sub=sub)
        out: dict[str, Any] = {}
        for k, v in tq.items():
            name, _, count = str(k).partition(":")
            canon = lookup_accelerator(name)
            if canon is None:
                sugg = suggest_accelerators(name)
                fail(f"target_qps_per_replica: unknown accelerator {name!r}",
                     f"did you mean {', '.join(map(repr, sugg))}?" if sugg
                     else "run `skyd gpus list` to see known accelerators", sub=(*sub, str(k)))
            if count and not (count.isdigit() and int(count) > 0):
                fail(f"target_qps_per_replica: bad accelerator count in {k!r}",
                     "write NAME or NAME:COUNT, e.g. 'A100:8'", sub=(*sub, str(k)))
            why = bounds.problem(v, "target_qps_per_replica")
            if why is not None:
                fail(f"target_qps_per_replica[{k!r}] {why}",
                     bounds.hint("target_qps_per_replica"), sub=(*sub, str(k)))
            out[canon + (f":{count}" if count else "")] = v
        return {**data, "target_qps_per_replica": out}

    @model_validator(mode="after")
    def _scale(self) -> ReplicaPolicy:
        if self.max_replicas is not None:
            if self.max_replicas < self.min_replicas:
                fail(f"max_replicas ({self.max_replicas}) < min_replicas ({self.min_replicas})",
                     sub=("max_replicas",))
            if (self.max_replicas > self.min_replicas and self.target_qps_per_replica is None
                    and self.target_queue_length_per_replica is None):
                fail("autoscaling (max_replicas > min_replicas) needs target_qps_per_replica",
                     "add replica_policy.target_qps_per_replica, e.g. 2.5",
                     sub=("target_qps_per_replica",))
        return self


class TLS(SpecModel):
    _what: ClassVar[str] = "tls"
    keyfile: str
    certfile: str


class LoadBalancerSpec(SpecModel):
    _what: ClassVar[str] = "load_balancer"
    _bounds: ClassVar[dict[str, str]] = {"stream_timeout_seconds": "stream_timeout_seconds",
                                         "affinity_body_prefix": "affinity_body_prefix"}
    stream_timeout_seconds: int | float | None = None
    # skyd's `affinity` policy: hash this request header (else the first bytes of the body).
    affinity_header: str | None = None
    affinity_body_prefix: int | None = None


class ServiceSpec(SpecModel):
    """Serving spec. ``replicas: N`` is normalized into ``replica_policy.min_replicas``."""

    _what: ClassVar[str] = "service"
    _bounds: ClassVar[dict[str, str]] = {"replicas": "replicas", "ports": "port",
                                         "workers": "workers"}
    readiness_probe: ReadinessProbe = ReadinessProbe()
    replicas: int | None = None
    replica_policy: ReplicaPolicy = ReplicaPolicy()
    load_balancing_policy: Literal["round_robin", "least_load", "instance_aware_least_load",
                                   "affinity"] = "least_load"
    ports: int | None = None
    tls: TLS | None = None
    load_balancer: LoadBalancerSpec | None = None
    workers: int | None = None
    pool: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _forms(cls, data: Any) -> Any:
        if data is None:
            return {}
        if not isinstance(data, dict):
            fail("service must be a mapping", "e.g. service: {readiness_probe: /health, replicas: 2}")
        d = dict(data)
        if isinstance(d.get("pool"), dict):  # kept as written; its counts are bounded too
            try:
                d["pool"] = check_bounds(d["pool"], PoolSpec._bounds)
            except PydanticCustomError as e:
                ctx = e.context or {}
                fail(str(ctx.get("msg")), ctx.get("hint"), sub=("pool", *(ctx.get("sub") or ())))
        reps = d.get("replicas")
        pol = d.get("replica_policy")
        if reps is not None and bounds.problem(reps, "replicas") is None:  # else: its field
            reps = bounds.normalize(reps, "replicas")
            if isinstance(pol, dict):
                if pol.get("min_replicas", reps) != reps or pol.get("max_replicas") not in (None, reps):
                    fail("give either replicas: or replica_policy:, not both",
                         "use replica_policy.min_replicas/max_replicas for autoscaling",
                         sub=("replicas",))
            else:
                d["replica_policy"] = {"min_replicas": reps}
        lb = d.get("load_balancing_policy")
        if lb is None and isinstance(d.get("replica_policy"), dict) and isinstance(
                d["replica_policy"].get("target_qps_per_replica"), dict):
            d["load_balancing_policy"] = "instance_aware_least_load"  # as SkyServe does
        if isinstance(lb, str):
            d["load_balancing_policy"] = lb.strip().lower()
            if d["load_balancing_policy"] not in LB_POLICIES:
                fail(f"unknown load_balancing_policy {lb!r}", f"one of {', '.join(LB_POLICIES)}",
                     sub=("load_balancing_policy",))
        return d


class PoolSpec(SpecModel):
    """``pool:`` (SkyPilot's worker pools for `sky jobs pool apply`): checked and kept so
    the YAML loads unchanged; `skyd jobs pool apply` runs them (see docs/jobs.md)."""

    _what: ClassVar[str] = "pool"
    _bounds: ClassVar[dict[str, str]] = {
        "workers": "workers", "min_workers": "workers", "max_workers": "workers",
        "queue_length_threshold": "queue_length_threshold",
        "upscale_delay_seconds": "scale_delay_seconds",
        "downscale_delay_seconds": "scale_delay_seconds",
    }
    workers: int | None = None
    min_workers: int | None = None
    max_workers: int | None = None
    queue_length_threshold: int | None = None
    upscale_delay_seconds: int | float | None = None
    downscale_delay_seconds: int | float | None = None

    @model_validator(mode="before")
    @classmethod
    def _counts(cls, data: Any) -> Any:
        if isinstance(data, int) and not isinstance(data, bool):
            data = {"workers": data}
        if not isinstance(data, dict):
            fail("pool must be a mapping", "e.g. pool: {workers: 2}")
        lo: Any = data.get("min_workers")
        hi: Any = data.get("max_workers")
        if (bounds.problem(lo, "workers") is None and bounds.problem(hi, "workers") is None
                and hi < lo):
            fail(f"max_workers ({hi}) < min_workers ({lo})", sub=("max_workers",))
        return data
