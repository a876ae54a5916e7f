"""``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}`` and ``$$`` substitution.

Unlike SkyPilot (which leaves unknown variables in silently and mangles ``${VAR:-x}``), an
unset variable without a default is an error naming the variable and where it appears.
Defaults may themselves contain substitutions (``${A:-${B:-x}}``). The ``lenient`` mode
(used for ``resources``) substitutes only variables that have a value and keeps any other
``$`` text as written, as SkyPilot does there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path as FsPath
from typing import Any

from skyd.errors import InvalidSpecError
from skyd.models._errors import LineMap, Path, fmt_path, line_for

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Unset(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


def _matching_brace(s: str, start: int) -> int:
    """Index of the '}' closing the '${' whose '{' is at ``start``; -1 if none."""
    depth = 0
    i = start
    while i < len(s):
        c = s[i]
        if c == "$" and i + 1 < len(s) and s[i + 1] == "{":
            depth += 1
            i += 2
            continue
        if c == "{" and i == start:
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def substitute(s: str, env: Mapping[str, str | None], *, keep: frozenset[str] = frozenset(),
               lenient: bool = False) -> str:
    """Expand one string. ``keep``: names whose value is not known yet (left as written).

    Raises ``_Unset`` for a variable with no value and no default; ValueError on bad syntax.
    ``lenient``: substitute only variables that have a value (and ``${VAR:-default}``);
    any other ``$`` text stays as written (SkyPilot keeps ``VM.Standard.E4.Flex$_2_16``).
    """
    out: list[str] = []
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c != "$" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
            continue
        if nxt == "{":
            end = _matching_brace(s, i + 1)
            if end < 0:
                if lenient:
                    out.append(s[i:])
                    break
                raise ValueError(f"unclosed '${{' in {s!r}")
            inner = s[i + 2:end]
            m = _NAME.match(inner)
            if not m:
                if lenient:
                    out.append(s[i:end + 1])
                    i = end + 1
                    continue
                raise ValueError(f"bad variable reference '${{{inner}}}' in {s!r}")
            name, rest = m.group(0), inner[m.end():]
            val = env.get(name)
            if rest == "":
                if name in keep or (lenient and val is None):
                    out.append(s[i:end + 1])
                elif val is None:
                    raise _Unset(name)
                else:
                    out.append(val)
            elif rest.startswith(":-") or rest.startswith("-"):
                default = rest[2:] if rest.startswith(":-") else rest[1:]
                use_default = val is None or (rest.startswith(":-") and val == "")
                if name in keep and val is None:
                    out.append(s[i:end + 1])
                elif use_default:
                    out.append(substitute(default, env, keep=keep, lenient=lenient))
                else:
                    out.append(val or "")
            elif lenient:
                out.append(s[i:end + 1])
            else:
                raise ValueError(
                    f"unsupported substitution '${{{inner}}}' in {s!r} "
                    "(supported: $VAR, ${VAR}, ${VAR:-default}, ${VAR-default}, $$)")
            i = end + 1
            continue
        m = _NAME.match(s, i + 1)
        if not m:
            out.append("$")  # "$5", "$(", trailing "$": literal
            i += 1
            continue
        name = m.group(0)
        if name in keep or (lenient and env.get(name) is None):
            out.append(s[i:m.end()])
        elif env.get(name) is None:
            raise _Unset(name)
        else:
            out.append(env[name] or "")
        i = m.end()
    return "".join(out)


def substitute_tree(value: Any, env: Mapping[str, str | None], path: Path, *,
                    keys: bool = False, keep: frozenset[str] = frozenset(),
                    lines: LineMap | None = None, lenient: bool = False,
                    errors: list[InvalidSpecError] | None = None) -> Any:
    """Substitute every string leaf (and mapping keys when ``keys``) under ``value``.

    ``errors`` given: a bad string is recorded there (and kept as written) instead of
    raising, so every one is reported.
    """
    def one(s: str, p: Path) -> str:
        try:
            return _one(s, p)
        except InvalidSpecError as e:
            if errors is None:
                raise
            errors.append(e)
            return s

    def _one(s: str, p: Path) -> str:
        try:
            return substitute(s, env, keep=keep, lenient=lenient)
        except _Unset as u:
            raise InvalidSpecError(
                f"variable ${u.name} is not set (in {s!r})",
                field=fmt_path(p), line=line_for(p, lines),
                hint=f"add it to envs: or pass --env {u.name}=...; "
                     f"write ${{{u.name}:-default}} for a default, or $$ for a literal $",
            ) from None
        except ValueError as e:
            raise InvalidSpecError(str(e), field=fmt_path(p), line=line_for(p, lines),
                                   hint="write $$ for a literal $") from None

    def walk(v: Any, p: Path) -> Any:
        if isinstance(v, str):
            return one(v, p)
        if isinstance(v, list):
            return [walk(x, p + (i,)) for i, x in enumerate(v)]
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                nk = one(k, p + (k,)) if keys and p == path and isinstance(k, str) else k
                out[nk] = walk(x, p + (k,))
            return out
        return v

    return walk(value, path)


_ENV_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")


def parse_env_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """Parse a dotenv file: ``KEY=VAL``, ``export KEY=VAL``, quotes, ``#`` comments."""
    p = FsPath(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise InvalidSpecError(f"cannot read env file {str(p)!r}: {e.strerror}",
                               field="--env-file", hint="check the path") from None
    out: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _ENV_LINE.match(line)
        if not m:
            raise InvalidSpecError(f"bad line in env file {str(p)!r}: {raw!r}",
                                   field="--env-file", line=lineno,
                                   hint="each line is KEY=VALUE")
        key, val = m.group(1), m.group(2).strip()
        if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"":
            val = val[1:-1]
            if m.group(2).strip()[0] == '"':
                val = val.replace("\\n", "\n").replace('\\"', '"')
        else:
            val = re.sub(r"\s+#.*$", "", val)
        out[key] = val
    return out
