"""Pydantic bodies of the built-in endpoints (also the source of /v1/openapi.json)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ApiModel(BaseModel):
    """Validators and serializers are built on first use, not when the daemon starts (most
    of these bodies are never seen by a given daemon)."""

    model_config = ConfigDict(defer_build=True)


class ErrorInfo(ApiModel):
    type: str
    message: str
    field: str | None = None
    hint: str | None = None
    line: int | None = None
    exit_code: int = 1


class ErrorBody(ApiModel):
    error: ErrorInfo


class SubmitResponse(ApiModel):
    request_id: str
    created: bool = True  # False: a resubmit under an existing X-Skyd-Request-Id


class RequestRecord(ApiModel):
    id: str
    verb: str
    status: str
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    cluster_name: str | None = None
    payload: Any = None
    result: Any = None
    error: ErrorInfo | None = None
    stages: list[dict[str, Any]] | None = None
    pid: int | None = None


class CancelResponse(ApiModel):
    request_id: str
    status: str
    cancelled: bool


class HealthResponse(ApiModel):
    status: str
    version: str
    pid: int
    uptime_s: float
    socket: str
    home: str
    requests_in_flight: int
    shared_socket: str | None = None  # a daemon shared with a Unix group: the group's socket


class VersionResponse(ApiModel):
    version: str
    api: str = "v1"


class SleepBody(ApiModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    # strict: a bool or a string is not a number of seconds; NaN/inf fail the bounds
    seconds: float = Field(1.0, ge=0, le=86400, strict=True, allow_inf_nan=False)
    log_every: float = Field(0.1, gt=0, le=3600, strict=True, allow_inf_nan=False,
                             description="seconds between log lines")
    fail: str | None = Field(None, description="raise a SkydError with this message at the end")


class ValidateBody(ApiModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    yaml: str = Field(..., description="task YAML text (multi-document = chain DAG)")
    env: dict[str, str] = Field(default_factory=dict, description="--env overrides")
    base_dir: str | None = Field(None, description="directory relative paths resolve against")
    path: str | None = Field(None, description="file name, for messages")


class ValidateResponse(ApiModel):
    dag: dict[str, Any]
    warnings: list[str] = Field(default_factory=list)
