"""Field paths, suggestions, and turning pydantic errors into InvalidSpecError."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from skyd.errors import InvalidSpecError, InvalidSpecErrors

Path = tuple[str | int, ...]
LineMap = Mapping[Path, int]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def fmt_path(path: Iterable[str | int]) -> str:
    """('resources', 'any_of', 1, 'accelerators') -> 'resources.any_of[1].accelerators'."""
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _IDENT.match(p):
            out += f".{p}" if out else p
        else:
            out += f"[{p!r}]"
    return out


def line_for(path: Path, lines: LineMap | None) -> int | None:
    """Line of the deepest prefix of ``path`` that the YAML recorded."""
    if not lines:
        return None
    for n in range(len(path), -1, -1):
        ln = lines.get(path[:n])
        if ln is not None:
            return ln
    return None


def suggest(word: str, choices: Iterable[str]) -> str | None:
    m = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return m[0] if m else None


def fail(msg: str, hint: str | None = None, sub: Path = ()) -> NoReturn:
    """Raise from inside a pydantic validator; converted to InvalidSpecError later."""
    raise PydanticCustomError("skyd", "{msg}", {"msg": msg, "hint": hint, "sub": sub})


def check_keys(data: Any, allowed: Iterable[str], what: str) -> None:
    """Unknown keys -> error naming the key, with a close-match suggestion."""
    if not isinstance(data, dict):
        return
    allowed = list(allowed)
    for k in data:
        if k not in allowed:
            s = suggest(str(k), allowed)
            hint = f"did you mean '{s}'?" if s else f"valid fields: {', '.join(sorted(allowed))}"
            fail(f"unknown field '{k}' in {what}", hint, sub=(str(k),))


def check_bounds(data: dict[Any, Any], fields: Mapping[str, str], *, at_field: bool = False
                 ) -> dict[Any, Any]:
    """Each present, non-null ``fields`` entry of ``data`` checked against the bounds table
    (``skyd.bounds``): a copy of ``data`` with counts made ints, or ``fail()`` (at the
    entry; ``at_field``: inside that field's own validator)."""
    from skyd import bounds

    out = dict(data)
    for name, key in fields.items():
        v = out.get(name)
        if v is None:
            continue
        why = bounds.problem(v, key)
        if why is not None:
            fail(f"{name} {why}", bounds.hint(key), sub=() if at_field else (name,))
        out[name] = bounds.normalize(v, key)
    return out


_TYPE_TAG = re.compile(r"[\[\]]|^(str|int|float|bool|none|dict|list|tuple|literal|union)$", re.I)


def _clean_loc(loc: tuple[Any, ...]) -> Path:
    out: list[str | int] = []
    for p in loc:
        if isinstance(p, int):
            out.append(p)
        elif isinstance(p, str) and not _TYPE_TAG.search(p) and not p.startswith("function-"):
            out.append(p)
    return tuple(out)


def convert_validation_error(
    exc: ValidationError, prefix: Path = (), lines: LineMap | None = None
) -> InvalidSpecError:
    """The first pydantic error -> one InvalidSpecError with field path, line and hint."""
    errs = exc.errors(include_url=False)
    # Prefer our own messages over the generic ones pydantic adds for union branches.
    errs.sort(key=lambda e: 0 if e.get("type") == "skyd" else 1)
    e = errs[0]
    ctx = e.get("ctx") or {}
    path = prefix + _clean_loc(tuple(e.get("loc", ()))) + tuple(ctx.get("sub") or ())
    msg = str(ctx.get("msg") or e.get("msg", "invalid value"))
    hint = ctx.get("hint")
    if e.get("type") != "skyd":
        msg = _friendly(e)
        hint = hint or "see the SkyPilot task YAML reference for this field's form"
    return InvalidSpecError(msg, field=fmt_path(path) or None, hint=hint,
                            line=line_for(path, lines))


def _anchor(loc: tuple[Any, ...]) -> Path:
    """The field an error is about: its location up to the first union-branch tag."""
    out: list[str | int] = []
    for p in loc:
        if isinstance(p, str) and (_TYPE_TAG.search(p) or p.startswith("function-")):
            break
        out.append(p)
    return tuple(out)


def convert_validation_errors(
    exc: ValidationError, prefix: Path = (), lines: LineMap | None = None
) -> list[InvalidSpecError]:
    """Every pydantic error -> InvalidSpecErrors: one per field (the best message of the
    union branches pydantic tried for that field)."""
    groups: dict[Path, list[Any]] = {}
    for e in exc.errors(include_url=False):
        groups.setdefault(_anchor(tuple(e.get("loc", ()))), []).append(e)
    out: list[InvalidSpecError] = []
    for errs in groups.values():
        errs.sort(key=lambda e: 0 if e.get("type") == "skyd" else 1)
        out.append(_one_error(errs[0], prefix, lines))
    return out


def _one_error(e: Mapping[str, Any], prefix: Path, lines: LineMap | None) -> InvalidSpecError:
    ctx = e.get("ctx") or {}
    path = prefix + _clean_loc(tuple(e.get("loc", ()))) + tuple(ctx.get("sub") or ())
    msg = str(ctx.get("msg") or e.get("msg", "invalid value"))
    hint = ctx.get("hint")
    if e.get("type") != "skyd":
        msg = _friendly(e)
        hint = hint or "see the SkyPilot task YAML reference for this field's form"
    return InvalidSpecError(msg, field=fmt_path(path) or None, hint=hint,
                            line=line_for(path, lines))


def flatten(err: InvalidSpecError) -> list[InvalidSpecError]:
    """The single errors inside ``err`` (itself when it is one)."""
    return list(err.errors) if isinstance(err, InvalidSpecErrors) else [err]


def combine(errors: list[InvalidSpecError], source: str | None = None) -> InvalidSpecError:
    """One error for a list of them: duplicates dropped, in file order (by line)."""
    seen: set[tuple[str | None, str, int | None]] = set()
    uniq: list[InvalidSpecError] = []
    for e in errors:
        for one in flatten(e):
            key = (one.field, one.message, one.line)
            if key not in seen:
                seen.add(key)
                uniq.append(one)
    uniq.sort(key=lambda e: (e.line is None, e.line or 0))
    if len(uniq) == 1:
        return uniq[0]
    return InvalidSpecErrors(uniq, source)


def _friendly(e: Mapping[str, Any]) -> str:
    t = e.get("type", "")
    inp = e.get("input")
    if t == "missing":
        return "required field is missing"
    if t == "extra_forbidden":
        return "unknown field"
    shown = repr(inp)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"wrong type or value {shown}: {e.get('msg', '')}".rstrip(": ")


def custom_to_spec(
    e: PydanticCustomError, path: Path, lines: LineMap | None = None
) -> InvalidSpecError:
    """A ``fail()`` raised outside pydantic validation -> InvalidSpecError at ``path``."""
    ctx = e.context or {}
    full = path + tuple(ctx.get("sub") or ())
    return InvalidSpecError(str(ctx.get("msg", e.message())), field=fmt_path(full) or None,
                            hint=ctx.get("hint"), line=line_for(full, lines))
