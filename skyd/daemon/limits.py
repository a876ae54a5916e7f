"""Sizes a client may send, checked where a body enters (every POST: submits, validate,
reads with a body), so one careless or hostile request can never be stored, replayed to
every follower or loaded by every listing.

- the body: :data:`MAX_BODY` (aiohttp's ``client_max_size`` too);
- one string anywhere in it (a task YAML, an ``exec`` command, a path): :data:`MAX_TEXT`;
  a task's ``run`` of megabytes is a mistake, and a YAML over 1 MiB is not a task;
- an env or secret value: :data:`MAX_ENV_VALUE`, the kernel's limit for one
  ``NAME=value`` string passed to a process (MAX_ARG_STRLEN, 128 KiB): a longer one could
  never reach the job; all of a body's env and secret values together: :data:`MAX_ENV_TOTAL`
  (the kernel's ARG_MAX for argv + environ is 2 MiB);
- entries of one list or mapping: :data:`MAX_ITEMS`.

A refusal is 413 (``PayloadTooLargeError``, exit 2) naming the field by its path in the body
(``yaml``, ``command``, ``env.FOO``) and the limit."""

from __future__ import annotations

from typing import Any

from skyd.errors import InvalidSpecError

MAX_BODY = 4 * 1024 * 1024
MAX_TEXT = 1024 * 1024
MAX_ENV_VALUE = 128 * 1024
MAX_ENV_TOTAL = 1024 * 1024
MAX_ITEMS = 10_000
ENV_FIELDS = frozenset({"env", "envs", "secrets"})


class PayloadTooLargeError(InvalidSpecError):
    """A body or a field over its size limit (HTTP 413, exit 2)."""

    http_status = 413


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n // 1024} KiB"


def check_sizes(body: Any) -> None:
    """Raise PayloadTooLargeError for the first field over its limit (iterative walk)."""
    env_total = 0
    stack: list[tuple[Any, str, bool]] = [(body, "", False)]
    while stack:
        obj, path, in_env = stack.pop()
        if isinstance(obj, str):
            n = len(obj.encode("utf-8", "surrogatepass"))
            limit = MAX_ENV_VALUE if in_env else MAX_TEXT
            if n > limit:
                what = "an env/secret value" if in_env else "a field"
                raise PayloadTooLargeError(
                    f"{path or 'body'} is {_size(n)}: {what} may hold at most {_size(limit)}",
                    field=path or "body",
                    hint=("put large data in a file and reach it through file_mounts or the "
                          "workdir" if not in_env else
                          "a process cannot receive an env value this long; pass a file"))
            if in_env:
                env_total += n
                if env_total > MAX_ENV_TOTAL:
                    raise PayloadTooLargeError(
                        f"the env and secret values of this request add up to more than "
                        f"{_size(MAX_ENV_TOTAL)}", field=path,
                        hint="a process's environment is limited to 2 MiB; pass a file")
        elif isinstance(obj, dict | list):
            if len(obj) > MAX_ITEMS:
                raise PayloadTooLargeError(
                    f"{path or 'body'} has {len(obj)} entries; at most {MAX_ITEMS} are accepted",
                    field=path or "body")
            if isinstance(obj, dict):
                for k, v in obj.items():
                    key = str(k)
                    sub = f"{path}.{key}" if path else key
                    env = in_env or (key in ENV_FIELDS and isinstance(v, dict))
                    if len(key) > MAX_ENV_VALUE:
                        raise PayloadTooLargeError(f"a key in {path or 'body'} is too long",
                                                   field=path or "body")
                    if env:
                        env_total += len(key)
                    stack.append((v, sub, env))
            else:
                stack.extend((v, f"{path}[{i}]", in_env) for i, v in enumerate(obj))
