"""``resources:`` section -> list of candidate Resources (any_of / ordered / accelerator sets)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from skyd.errors import InvalidSpecError
from skyd.models._errors import (
    LineMap,
    Path,
    combine,
    convert_validation_errors,
    custom_to_spec,
    flatten,
    fmt_path,
    line_for,
)
from skyd.models.accelerators import expand_accelerators
from skyd.models.resources import RESOURCE_ALIASES, Resources

_LOCATION_KEYS = ("infra", "cloud", "region", "zone")


def build_resources(d: dict[str, Any], path: Path = ("resources",),
                    lines: LineMap | None = None) -> Resources:
    """One Resources from a YAML mapping; errors carry ``path`` and the YAML line (every
    bad field is reported, not only the first)."""
    try:
        return Resources.model_validate(d)
    except ValidationError as e:
        raise combine(convert_validation_errors(e, path, lines)) from None
    except PydanticCustomError as e:
        raise custom_to_spec(e, path, lines) from None


def _aliased(d: dict[str, Any], path: Path, lines: LineMap | None) -> dict[str, Any]:
    """``gpus:`` -> ``accelerators:`` (SkyPilot's RESOURCE_CONFIG_ALIASES)."""
    for alias, field in RESOURCE_ALIASES.items():
        if alias not in d:
            continue
        if d.get(field) is not None and d[alias] is not None:
            raise InvalidSpecError(
                f"'{alias}' and '{field}' are the same field; give one",
                field=fmt_path(path + (alias,)), line=line_for(path + (alias,), lines),
                hint=f"drop '{alias}:' (it is an alias of '{field}:')")
        d = {(field if k == alias else k): v for k, v in d.items()
             if not (k == alias and v is None and field in d)}
    return d


def _acc_key(d: dict[str, Any]) -> str:
    """The key the accelerators were written under (errors point at it)."""
    for alias, field in RESOURCE_ALIASES.items():
        if field == "accelerators" and d.get(alias) is not None:
            return alias
    return "accelerators"


def _merge(base: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """An any_of/ordered entry over the base fields; a location in the entry replaces the
    base's; labels are merged (as SkyPilot does)."""
    out = dict(base)
    if any(k in entry for k in _LOCATION_KEYS):
        for k in _LOCATION_KEYS:
            out.pop(k, None)
    labels = entry.get("labels")
    out.update(entry)
    if isinstance(base.get("labels"), dict) and isinstance(labels, dict):
        out["labels"] = {**base["labels"], **labels}
    return out


def expand_resources(
    config: Any, *, path: Path = ("resources",), lines: LineMap | None = None
) -> tuple[list[Resources], bool]:
    """Expand a task's ``resources:`` mapping into candidates.

    Returns ``(candidates, ordered)``: ``ordered`` is True for ``ordered:`` and for an
    accelerator list (``[A100:8, H100:8]``); False means "any of, cheapest wins". An
    accelerator set or list next to ``any_of:``/``ordered:`` is crossed with the entries
    (each entry without its own accelerators takes every one of them), as in SkyPilot.
    Every mistake in the section is reported (one InvalidSpecError or InvalidSpecErrors).
    """
    if config is None:
        return [Resources()], False
    if not isinstance(config, dict):
        raise InvalidSpecError(
            f"resources must be a mapping, got {type(config).__name__}",
            field=fmt_path(path), line=line_for(path, lines),
            hint="e.g. resources: {accelerators: A100:8}",
        )
    base = _aliased(dict(config), path, lines)
    base_key = _acc_key(config)
    any_of = base.pop("any_of", None)
    ordered_list = base.pop("ordered", None)
    if any_of is not None and ordered_list is not None:
        raise InvalidSpecError(
            "any_of and ordered cannot both be given", field=fmt_path(path),
            line=line_for(path + ("ordered",), lines),
            hint="use any_of: for 'cheapest of these' or ordered: for 'in this order'",
        )
    errors: list[InvalidSpecError] = []
    # (merged fields, the entry's path, the path its accelerators come from)
    entries: list[tuple[dict[str, Any], Path, Path]]
    ordered = False
    if any_of is not None or ordered_list is not None:
        key = "any_of" if any_of is not None else "ordered"
        lst = any_of if any_of is not None else ordered_list
        ordered = key == "ordered"
        if not isinstance(lst, list) or not lst:
            raise InvalidSpecError(f"{key} must be a non-empty list of mappings",
                                   field=fmt_path(path + (key,)),
                                   line=line_for(path + (key,), lines))
        entries = []
        own: list[set[str]] = []
        for i, e in enumerate(lst):
            ep = path + (key, i)
            try:
                if not isinstance(e, dict):
                    raise InvalidSpecError(f"{key} entries must be mappings, got {e!r}",
                                           field=fmt_path(ep), line=line_for(ep, lines))
                for nested in ("any_of", "ordered"):
                    if nested in e:
                        raise InvalidSpecError(f"{nested} cannot be nested inside {key}",
                                               field=fmt_path(ep + (nested,)),
                                               line=line_for(ep + (nested,), lines))
                entry = _aliased(e, ep, lines)
            except InvalidSpecError as err:
                errors.append(err)
                continue
            acc_at = (ep + (_acc_key(e),) if entry.get("accelerators") is not None
                      else path + (base_key,))
            entries.append((_merge(base, entry), ep, acc_at))
            own.append(set(entry) | set(e))
    else:
        entries = [(base, path, path + (base_key,))]
        own = [set(base)]

    out: list[Resources] = []
    for (d, p, acc_path), keys in zip(entries, own, strict=True):
        try:
            is_list = _expand_entry(d, p, acc_path, lines, out)
        except InvalidSpecError as err:
            # A bad field inherited from the section itself is reported there, once.
            errors.extend(_reanchor(one, p, keys, path, lines) for one in flatten(err))
            continue
        if len(entries) == 1 and any_of is None and ordered_list is None:
            ordered = is_list
    if errors:
        raise combine(errors)
    return out, ordered


def _reanchor(err: InvalidSpecError, p: Path, own: set[str], base: Path,
              lines: LineMap | None) -> InvalidSpecError:
    prefix = fmt_path(p)
    field = err.field or ""
    if p == base or not field.startswith(prefix + "."):
        return err
    rest = field[len(prefix):]
    key = rest[1:].split(".")[0].split("[")[0]
    if key in own:
        return err
    return InvalidSpecError(err.message, field=fmt_path(base) + rest, hint=err.hint,
                            line=line_for(base + (key,), lines))


def _expand_entry(d: dict[str, Any], p: Path, acc_path: Path, lines: LineMap | None,
                  out: list[Resources]) -> bool:
    """One (merged) entry x its accelerator options -> candidates appended to ``out``.
    Returns whether the accelerators were a list (an order of preference)."""
    acc = d.get("accelerators")
    if acc is None:
        _add(out, build_resources(d, p, lines))
        return False
    errors: list[InvalidSpecError] = []
    try:
        opts, is_list = expand_accelerators(acc, field=fmt_path(acc_path))
    except InvalidSpecError as err:
        err.line = err.line or line_for(acc_path, lines)
        errors.append(err)
        try:  # the entry's other fields are checked too
            build_resources({**d, "accelerators": None}, p, lines)
        except InvalidSpecError as more:
            errors.append(more)
        raise combine(errors) from None
    for name, count in opts:
        try:
            _add(out, build_resources({**d, "accelerators": {name: count}}, p, lines))
        except InvalidSpecError as err:
            errors.append(err)
    if errors:
        raise combine(errors)
    return is_list


def _add(out: list[Resources], r: Resources) -> None:
    if r not in out:
        out.append(r)
