"""Secret values of a request: out of its payload, into a 0600 file, back for the handler.

At submit, ``split_payload`` takes the ``--secret`` values (payload ``secrets``) and the
values of the YAML's ``secrets:`` out of the payload; ``store`` writes them to
``SKYD_HOME/secrets/requests/<id>.json`` before the row exists and records ``secret_ref``
in the payload. The row keeps the keys with ``<redacted>`` values. When the request runs
(first run or resumed after a restart), ``attach`` reads the file and hands the handler a
payload with the values; the request's events and error are masked with them
(``SecretAwareContext``). ``forget`` deletes the file once the request is terminal.
"""

from __future__ import annotations

import re
from typing import Any

import anyio

from skyd import secretfiles
from skyd.daemon.context import RequestContext
from skyd.errors import InvalidSpecError, SkydError
from skyd.models.redaction import REDACTED

SECRET_REF = "secret_ref"
TASK_SECRETS = "_task_secrets"  # handler payload only (values per task); never stored
MIN_MASK_LEN = 4  # shorter values are not masked in free text (they would mangle it)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _overrides(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidSpecError("secrets must be a mapping of NAME: value", field="secrets",
                               hint="e.g. {\"HF_TOKEN\": \"...\"} (CLI: --secret HF_TOKEN)")
    out: dict[str, str] = {}
    for k, v in raw.items():
        if not isinstance(k, str) or not _NAME_RE.match(k):
            raise InvalidSpecError(f"{str(k)[:64]!r} is not a valid secret name",
                                   field="secrets", hint="names match [A-Za-z_][A-Za-z0-9_]*")
        if not isinstance(v, str):  # a number or a bool is a mistake, as in `env`
            raise InvalidSpecError(f"secret {k} needs a string value, got {type(v).__name__}",
                                   field=f"secrets.{k}",
                                   hint=f"--secret {k}=VALUE, or --secret {k} to take it from "
                                        "your environment")
        out[k] = str(v)
    return out


def split_payload(payload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(payload to store, what goes in the secrets file or None when there is nothing)."""
    from skyd.models.secret_split import split_yaml_secrets

    payload = {k: v for k, v in payload.items() if k not in (SECRET_REF, TASK_SECRETS)}
    over = _overrides(payload.get("secrets"))
    payload.pop("secrets", None)
    per_task: list[dict[str, str]] = []
    text = payload.get("yaml")
    if isinstance(text, str):
        text, per_task = split_yaml_secrets(text, str(payload.get("yaml_path") or "<inline>"))
        payload["yaml"] = text
    if not over and not any(per_task):
        return payload, None
    if over:
        payload["secrets"] = {k: REDACTED for k in over}
    return payload, {"overrides": over, "tasks": per_task}


async def asplit(payload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``split_payload`` off the event loop when there is YAML to look into."""
    text = payload.get("yaml")
    if isinstance(text, str) and "secrets" in text:
        return await anyio.to_thread.run_sync(split_payload, payload)
    return split_payload(payload)


async def store(rid: str, payload: dict[str, Any], held: dict[str, Any] | None
                ) -> dict[str, Any] | None:
    """Write the file of request ``rid`` (when there are secrets); the payload to store, or
    None when ``rid`` already has a file (pick another id)."""
    if held is None:
        return payload
    try:
        await secretfiles.awrite(secretfiles.request_file(rid), held, exclusive=True)
    except FileExistsError:
        return None
    return {**payload, SECRET_REF: rid}


async def discard(rid: str, held: dict[str, Any] | None) -> None:
    """Undo ``store`` (the row could not be inserted)."""
    if held is not None:
        await secretfiles.aremove(secretfiles.request_file(rid))


async def attach(ctx: RequestContext, payload: dict[str, Any]) -> dict[str, Any]:
    """The payload the handler gets: with the secret values back (stored one unchanged)."""
    ref = payload.get(SECRET_REF)
    if not ref:
        return payload
    data = await secretfiles.aread(secretfiles.request_file(str(ref)))
    if data is None:
        raise SkydError("the secret values of this request are gone "
                        f"({secretfiles.request_file(str(ref))} is missing)",
                        field="secrets", hint="run the command again")
    over = {str(k): str(v) for k, v in (data.get("overrides") or {}).items()}
    tasks = [{str(k): str(v) for k, v in t.items()} for t in data.get("tasks") or []]
    if isinstance(ctx, SecretAwareContext):
        ctx.mask = _mask_values([over, *tasks])
    return {**payload, "secrets": over, TASK_SECRETS: tasks}


async def forget(ctx: RequestContext) -> None:
    ref = ctx.payload.get(SECRET_REF)
    if ref:
        await secretfiles.aremove(secretfiles.request_file(str(ref)))


async def sweep(keep: set[str]) -> None:
    """Delete request secret files of requests that will not run again."""
    for rid in await secretfiles.anames("requests"):
        if rid not in keep:
            await secretfiles.aremove(secretfiles.request_file(rid))


def _mask_values(maps: list[dict[str, str]]) -> tuple[str, ...]:
    vals = {v for m in maps for v in m.values() if len(v) >= MIN_MASK_LEN}
    return tuple(sorted(vals, key=len, reverse=True))


def mask_text(text: str, mask: tuple[str, ...]) -> str:
    for v in mask:
        if v in text:
            text = text.replace(v, REDACTED)
    return text


def mask_obj(obj: Any, mask: tuple[str, ...]) -> Any:
    if not mask:
        return obj
    if isinstance(obj, str):
        return mask_text(obj, mask)
    if isinstance(obj, dict):
        return {k: mask_obj(v, mask) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [mask_obj(v, mask) for v in obj]
    return obj


def mask_error(err: SkydError, held: dict[str, Any] | None) -> SkydError:
    """``err`` (raised by a submit-time check) with the request's secret values masked."""
    if not held:
        return err
    mask = _mask_values([held.get("overrides") or {}, *(held.get("tasks") or [])])
    for e in [err, *(getattr(err, "errors", None) or [])]:
        if isinstance(e, SkydError):
            e.message = mask_text(e.message, mask)
            e.args = (e.message,)
            if e.hint:
                e.hint = mask_text(e.hint, mask)
    return err


def redact(ctx: RequestContext, obj: Any) -> Any:
    """``obj`` with the request's secret values replaced by ``<redacted>``."""
    return mask_obj(obj, ctx.mask) if isinstance(ctx, SecretAwareContext) else obj


class SecretAwareContext(RequestContext):
    """A RequestContext whose events never carry the request's secret values."""

    __slots__ = ("mask",)

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.mask: tuple[str, ...] = ()

    def emit(self, event: dict[str, Any]) -> None:
        super().emit(mask_obj(event, self.mask) if self.mask else event)

    async def stage(self, name: str, state: Any, **info: Any) -> None:
        await super().stage(name, state, **(mask_obj(info, self.mask) if self.mask else info))
