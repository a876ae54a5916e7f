"""The one exception family for mistakes a user can make.

Every error a user can cause (bad YAML, unknown accelerator, infeasible request, unknown
cluster, missing credentials) is a :class:`SkydError`. It carries the field it is about,
the fix, and an exit code; the CLI prints ``error: <message>`` plus ``hint: <fix>`` and
exits with ``exit_code`` -- never a traceback. Over the daemon's API it travels as
``{"error": {"type", "message", "field", "hint", "exit_code"}}``.
"""

from __future__ import annotations

from typing import Any, Literal


class SkydError(Exception):
    """A mistake the user can fix. Printed without a traceback."""

    exit_code = 1
    type_name = "SkydError"

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        hint: str | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.hint = hint
        self.line = line

    def __str__(self) -> str:
        prefix = ""
        if self.field:
            prefix = f"{self.field}: "
        loc = f" (line {self.line})" if self.line else ""
        return f"{prefix}{self.message}{loc}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": type(self).__name__,
            "message": str(self),
            "field": self.field,
            "hint": self.hint,
            "line": self.line,
            "exit_code": self.exit_code,
        }


class InvalidSpecError(SkydError):
    """Bad task YAML / bad resource spec / bad CLI override (exit code 2)."""

    exit_code = 2


class InvalidSpecErrors(InvalidSpecError):
    """Several independent mistakes in one spec, each with its field, line and fix.

    Travels (and is rebuilt client-side) as an ``InvalidSpecError`` whose message lists
    every error; ``to_dict()`` adds ``errors``: one ``{field, line, message, hint}`` each.
    """

    def __init__(self, errors: list[InvalidSpecError], source: str | None = None) -> None:
        self.errors = list(errors)
        where = f" in {source}" if source else ""
        super().__init__(f"{len(self.errors)} errors{where}", hint=None)

    def __str__(self) -> str:
        lines = [self.message + ":"]
        for e in self.errors:
            lines.append(f"  {e}")
            if e.hint:
                lines.append(f"    hint: {e.hint}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["type"] = "InvalidSpecError"
        d["message"] = self.message
        d["errors"] = [spec_error_entry(e) for e in self.errors]
        return d


def spec_error_entry(e: SkydError) -> dict[str, Any]:
    """One error as a JSON entry: the bare message, with field, line and hint apart."""
    return {"field": e.field, "line": e.line, "message": e.message, "hint": e.hint}


class NotFoundError(SkydError):
    """Unknown cluster, job, request, service, pool."""

    exit_code = 3


FailoverScope = Literal["zone", "region", "cloud", "stop"]
"""What a provisioning failure rules out: the zone, the whole region, the whole cloud, or
everything (``stop``: no other candidate can do better; the launch ends with this error)."""

SCOPES: tuple[FailoverScope, ...] = ("zone", "region", "cloud", "stop")


class ResourcesUnavailableError(SkydError):
    """Nothing launchable: infeasible request, or every candidate blocked / out of capacity.

    Raised by a provisioner, it declares its failover ``scope`` and carries the provider's
    own words in ``provider_message`` (e.g. the API's error code and text). ``scope=None``
    lets the failover loop choose (the zone when the candidate has one, else the region).
    """

    exit_code = 4

    def __init__(
        self,
        message: str,
        *,
        scope: FailoverScope | None = None,
        provider_message: str | None = None,
        no_failover: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(message, **kw)
        if scope is not None and scope not in SCOPES:
            raise ValueError(f"bad failover scope {scope!r}; one of {SCOPES}")
        self.scope: FailoverScope | None = "stop" if no_failover else scope
        self.provider_message = provider_message

    @property
    def no_failover(self) -> bool:
        """True when no other candidate is worth trying (scope ``stop``)."""
        return self.scope == "stop"

    @no_failover.setter
    def no_failover(self, value: bool) -> None:
        if value:
            self.scope = "stop"
        elif self.scope == "stop":
            self.scope = None


class CredentialsError(SkydError):
    """A cloud's credentials are missing or wrong. Raised while provisioning, it blocks
    that whole cloud (failover moves on to the next cloud); it ends the launch only when
    no other cloud is left."""

    exit_code = 5


class ClusterStateError(SkydError):
    """The cluster is not in a state that allows the operation (e.g. exec on STOPPED)."""

    exit_code = 6


class DaemonUnavailableError(SkydError):
    """The daemon could not be reached or started."""

    exit_code = 7


class CancelledError(SkydError):
    """The request was cancelled."""

    exit_code = 130


_BY_NAME: dict[str, type[SkydError]] = {
    c.__name__: c
    for c in (
        SkydError,
        InvalidSpecError,
        NotFoundError,
        ResourcesUnavailableError,
        CredentialsError,
        ClusterStateError,
        DaemonUnavailableError,
        CancelledError,
    )
}


def error_from_dict(d: dict[str, Any]) -> SkydError:
    """Rebuild an error sent over the wire (client side)."""
    entries = d.get("errors")
    if d.get("type") == "InvalidSpecError" and isinstance(entries, list) and entries:
        errs = [InvalidSpecError(str(x.get("message", "")), field=x.get("field"),
                                 hint=x.get("hint"), line=x.get("line"))
                for x in entries if isinstance(x, dict)]
        many = InvalidSpecErrors(errs)
        many.message = str(d.get("message") or many.message)
        return many
    cls = _BY_NAME.get(str(d.get("type")), SkydError)
    err = cls.__new__(cls)
    SkydError.__init__(err, str(d.get("message", "")), hint=d.get("hint"))
    err.field = None  # message already carries the field prefix
    err.exit_code = int(d.get("exit_code", cls.exit_code))
    return err
