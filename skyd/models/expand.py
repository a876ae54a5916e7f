"""``resources:`` section -> list of candidate Resources (any_of / ordered / accelerator sets)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

from skyd.errors import InvalidSpecError
from skyd.models._errors import (
    LineMap,
    Path,
    convert_validation_error,
    custom_to_spec,
    fmt_path,
    line_for,
)
from skyd.models.accelerators import expand_accelerators
from skyd.models.resources import Resources

_LOCATION_KEYS = ("infra", "cloud", "region", "zone")


def build_resources(d: dict[str, Any], path: Path = ("resources",),
                    lines: LineMap | None = None) -> Resources:
    """One Resources from a YAML mapping; errors carry ``path`` and the YAML line."""
    try:
        return Resources.model_validate(d)
    except ValidationError as e:
        raise convert_validation_error(e, path, lines) from None
    except PydanticCustomError as e:
        raise custom_to_spec(e, path, lines) from None


def _merge(base: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """An any_of/ordered entry over the base fields; a location in the entry replaces the base's."""
    out = dict(base)
    if any(k in entry for k in _LOCATION_KEYS):
        for k in _LOCATION_KEYS:
            out.pop(k, None)
    out.update(entry)
    return out


def expand_resources(
    config: Any, *, path: Path = ("resources",), lines: LineMap | None = None
) -> tuple[list[Resources], bool]:
    """Expand a task's ``resources:`` mapping into candidates.

    Returns ``(candidates, ordered)``: ``ordered`` is True for ``ordered:`` and for an
    accelerator list (``[A100:8, H100:8]``); False means "any of, cheapest wins".
    """
    if config is None:
        return [Resources()], False
    if not isinstance(config, dict):
        raise InvalidSpecError(
            f"resources must be a mapping, got {type(config).__name__}",
            field=fmt_path(path), line=line_for(path, lines),
            hint="e.g. resources: {accelerators: A100:8}",
        )
    base = dict(config)
    any_of = base.pop("any_of", None)
    ordered_list = base.pop("ordered", None)
    if any_of is not None and ordered_list is not None:
        raise InvalidSpecError(
            "any_of and ordered cannot both be given", field=fmt_path(path),
            line=line_for(path + ("ordered",), lines),
            hint="use any_of: for 'cheapest of these' or ordered: for 'in this order'",
        )
    entries: list[tuple[dict[str, Any], Path]]
    ordered = False
    if any_of is not None or ordered_list is not None:
        key = "any_of" if any_of is not None else "ordered"
        lst = any_of if any_of is not None else ordered_list
        ordered = key == "ordered"
        if not isinstance(lst, list) or not lst:
            raise InvalidSpecError(f"{key} must be a non-empty list of mappings",
                                   field=fmt_path(path + (key,)),
                                   line=line_for(path + (key,), lines))
        base_acc = base.get("accelerators")
        if isinstance(base_acc, list | dict) and len(base_acc) > 1:
            raise InvalidSpecError(
                f"an accelerator set/list cannot be combined with {key}",
                field=fmt_path(path + ("accelerators",)),
                line=line_for(path + ("accelerators",), lines),
                hint=f"move each accelerator into its own {key} entry",
            )
        entries = []
        for i, e in enumerate(lst):
            if not isinstance(e, dict):
                raise InvalidSpecError(f"{key} entries must be mappings, got {e!r}",
                                       field=fmt_path(path + (key, i)),
                                       line=line_for(path + (key, i), lines))
            for nested in ("any_of", "ordered"):
                if nested in e:
                    raise InvalidSpecError(f"{nested} cannot be nested inside {key}",
                                           field=fmt_path(path + (key, i, nested)),
                                           line=line_for(path + (key, i, nested), lines))
            entries.append((_merge(base, e), path + (key, i)))
    else:
        entries = [(base, path)]

    out: list[Resources] = []
    for d, p in entries:
        acc = d.get("accelerators")
        if acc is None:
            _add(out, build_resources(d, p, lines))
            continue
        acc_path = p + ("accelerators",)
        try:
            opts, is_list = expand_accelerators(acc, field=fmt_path(acc_path))
        except InvalidSpecError as err:
            err.line = err.line or line_for(acc_path, lines)
            raise
        if len(entries) > 1 and len(opts) > 1 and (is_list or ordered):
            raise InvalidSpecError(
                "an accelerator list/set inside an ordered entry is ambiguous"
                if ordered else "an ordered accelerator list cannot appear inside any_of",
                field=fmt_path(acc_path), line=line_for(acc_path, lines),
                hint="give one accelerator per entry",
            )
        if is_list and len(entries) == 1:
            ordered = True
        for name, count in opts:
            _add(out, build_resources({**d, "accelerators": {name: count}}, p, lines))
    return out, ordered


def _add(out: list[Resources], r: Resources) -> None:
    if r not in out:
        out.append(r)
