"""Take the values of a task YAML's ``secrets:`` out of its text.

``split_yaml_secrets(text)`` returns the text with every secret value replaced by
``'<redacted>'`` (line numbers kept, so error messages still point at the right line) and,
per task the loader will build from the text, the values taken out. ``load_dag(...,
task_secrets=...)`` puts them back, so loading the redacted text with them gives the same
tasks as loading the original text.

The YAML is composed, never constructed as a whole (no alias expansion), and the result is
checked event by event against the original: anything else than the secret values that
would change refuses the text with a message naming the field.
"""

from __future__ import annotations

from typing import Any

import yaml

from skyd.errors import InvalidSpecError
from skyd.models.redaction import REDACTED

_PLACEHOLDER = f"'{REDACTED}'"
_NULL_TAG = "tag:yaml.org,2002:null"


def _err(field: str, msg: str, node: yaml.Node | None = None, hint: str | None = None
         ) -> InvalidSpecError:
    line = node.start_mark.line + 1 if node is not None else None
    return InvalidSpecError(msg, field=field, line=line, hint=hint)


def _value(node: yaml.ScalarNode) -> str:
    """The string the loader makes of a secret's scalar (numbers keep their source text)."""
    loader = yaml.SafeLoader("")
    try:
        v = loader.construct_object(node, deep=True)
    finally:
        loader.dispose()
    return node.value if isinstance(v, int | float) else str(v)


def _count_refs(root: yaml.Node) -> dict[int, int]:
    """How many times each node is reached from its parents (> 1: shared by an alias)."""
    counts: dict[int, int] = {}
    stack = [root]
    counts[id(root)] = 1
    while stack:
        n = stack.pop()
        children: list[yaml.Node] = []
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                children += [k, v]
        elif isinstance(n, yaml.SequenceNode):
            children = list(n.value)
        for c in children:
            seen = counts.get(id(c), 0)
            counts[id(c)] = seen + 1
            if not seen:
                stack.append(c)
    return counts


def _task_docs(nodes: list[yaml.Node]) -> list[yaml.Node]:
    """The documents that become tasks, as ``load_dag`` picks them (empty documents and a
    leading pipeline or job-group header are not tasks)."""
    from skyd.models.loader import is_header_keys

    docs = [n for n in nodes if not (isinstance(n, yaml.ScalarNode) and n.tag == _NULL_TAG)]
    if docs and isinstance(docs[0], yaml.MappingNode):
        keys = {k.value for k, _ in docs[0].value if isinstance(k, yaml.ScalarNode)}
        if len(keys) == len(docs[0].value) and is_header_keys(keys, len(docs)):
            docs = docs[1:]
    return docs


def split_yaml_secrets(text: str, source: str = "<task>") -> tuple[str, list[dict[str, str]]]:
    """(text without secret values, [{KEY: value} per task]). A text with no secret values
    comes back unchanged with an empty list."""
    if "secrets" not in text:
        return text, []
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except RecursionError:
        raise InvalidSpecError(f"{source} nests too deeply",
                               hint="flatten the YAML (a task is a few levels deep)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InvalidSpecError(
            f"invalid YAML in {source}: {getattr(e, 'problem', None) or e}",
            line=mark.line + 1 if mark is not None else None,
            hint="check indentation, quoting and ':' spacing near that line",
        ) from None
    spans: list[tuple[int, int]] = []
    per_task: list[dict[str, str]] = []
    for doc in _task_docs(nodes):
        found: dict[str, str] = {}
        per_task.append(found)
        if not isinstance(doc, yaml.MappingNode):
            continue
        refs: dict[int, int] | None = None
        for k, sec in doc.value:
            if not (isinstance(k, yaml.ScalarNode) and k.value == "secrets"):
                continue
            if not isinstance(sec, yaml.MappingNode):
                continue  # a list of managed secret references, or an error the loader names
            for sk, v in sec.value:
                name = str(sk.value) if isinstance(sk, yaml.ScalarNode) else "?"
                if isinstance(v, yaml.ScalarNode) and v.tag == _NULL_TAG:
                    continue  # declared null: given at launch with --secret
                if not isinstance(v, yaml.ScalarNode):
                    raise _err(f"secrets.{name}", f"{name} must be a string, got a "
                               f"{'mapping' if isinstance(v, yaml.MappingNode) else 'list'}", v)
                refs = refs if refs is not None else _count_refs(doc)
                if refs.get(id(v), 0) > 1:
                    raise _err(f"secrets.{name}",
                               f"the value of secret {name} is shared through a YAML anchor",
                               sk, hint=f"write the value in place, or pass --secret {name}=...")
                found[name] = _value(v)
                spans.append((v.start_mark.index, v.end_mark.index))
    if not spans:
        return text, []
    out = text
    for start, end in sorted(spans, reverse=True):
        out = out[:start] + _PLACEHOLDER + "\n" * out.count("\n", start, end) + out[end:]
    _check_same(text, out, len(spans))
    return out, per_task


def _event_key(ev: Any) -> tuple[Any, ...]:
    return (type(ev).__name__, getattr(ev, "anchor", None), getattr(ev, "tag", None),
            getattr(ev, "value", None))


def _check_same(before: str, after: str, replaced: int) -> None:
    """Only the secret values changed (else refuse: the text is not one we can redact)."""
    a: list[Any] = []
    b: list[Any] = [None]
    try:
        a = list(yaml.parse(before, Loader=yaml.SafeLoader))
        b = list(yaml.parse(after, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        pass
    diff = [(x, y) for x, y in zip(a, b, strict=False) if _event_key(x) != _event_key(y)]
    if len(a) != len(b) or len(diff) != replaced or any(
            not isinstance(y, yaml.ScalarEvent) or y.value != REDACTED for _, y in diff):
        raise InvalidSpecError(
            "the values under secrets: could not be separated from the rest of the YAML",
            field="secrets",
            hint="write each secret as a plain or quoted string, or pass --secret KEY=VALUE")
