"""YAML -> Task / Dag: parse with line marks, substitute env vars, resolve paths, validate."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path as FsPath
from typing import Any

import yaml
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
    suggest,
)
from skyd.models.dag import Dag
from skyd.models.envsubst import substitute_tree
from skyd.models.expand import expand_resources
from skyd.models.parsing import parse_duration
from skyd.models.storage import is_bucket_uri, resolve_local
from skyd.models.task import Task, note_load, str_scalars

# SkyPilot's top-level task keys (utils/schemas.py get_task_schema) + skyd's estimated_runtime.
TASK_KEYS: tuple[str, ...] = (
    "name", "workdir", "event_callback", "num_nodes", "resources", "file_mounts", "service",
    "pool", "setup", "run", "envs", "secrets", "managed_secrets", "inputs", "outputs",
    "file_mounts_mapping", "config", "volumes", "volume_mounts", "api_server_access",
    "_metadata", "estimated_runtime",
)
# Fields where $VAR substitution applies (SkyPilot: file_mounts, service, workdir, volumes).
SUBST_FIELDS: tuple[str, ...] = ("name", "workdir", "file_mounts", "resources", "service",
                                 "volumes")


# Bounds on a task YAML, checked on the event stream before anything is built from it.
MAX_YAML_BYTES = 1 << 20  # skyd.sdk.payloads.MAX_TASK_FILE_BYTES
MAX_YAML_DEPTH = 64  # nested mappings/sequences
MAX_ALIAS_NODES = 5_000  # nodes that aliases (*x) add when expanded, per document
MAX_YAML_NODES = 10_000  # nodes per document, aliases expanded (building more takes seconds)
_EVENT_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present


def _refuse(source: str, msg: str, mark: Any, hint: str) -> InvalidSpecError:
    line = mark.line + 1 if mark is not None else None
    return InvalidSpecError(f"{source}: {msg}", line=line, hint=hint)


def check_text_bounds(text: str, source: str) -> None:
    """Refuse, before composing anything, YAML that is too big, nests too deep, or whose
    aliases expand past MAX_ALIAS_NODES (a "billion laughs" bomb is ~400 bytes). Runs on
    PyYAML's event stream, which is iterative: any depth is safe to scan."""
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InvalidSpecError(f"{source} is not Unicode text (character {e.start} is a lone"
                               " surrogate)", hint="save the file as UTF-8") from None
    if size > MAX_YAML_BYTES:
        raise InvalidSpecError(f"{source} is {size} bytes; a task YAML may have at most"
                               f" {MAX_YAML_BYTES}", hint="keep data in files, not in the YAML")
    anchors: dict[str, int] = {}
    stack: list[list[Any]] = []  # [anchor, expanded size so far] per open collection
    aliased = total = 0
    for ev in yaml.parse(text, Loader=_EVENT_LOADER):
        if isinstance(ev, yaml.CollectionStartEvent):
            if len(stack) >= MAX_YAML_DEPTH:
                raise _refuse(source, f"nests deeper than {MAX_YAML_DEPTH} levels",
                              ev.start_mark, "flatten the structure")
            stack.append([ev.anchor, 1])
            total += 1
            continue
        if isinstance(ev, yaml.DocumentStartEvent):
            anchors, aliased, total = {}, 0, 0
            continue
        if isinstance(ev, yaml.CollectionEndEvent):
            anchor, n = stack.pop()
        elif isinstance(ev, yaml.ScalarEvent):
            anchor, n = ev.anchor, 1
        elif isinstance(ev, yaml.AliasEvent):
            anchor, n = None, anchors.get(str(ev.anchor), 1)
            aliased += n
            if aliased > MAX_ALIAS_NODES:
                raise _refuse(source, f"its aliases expand to more than {MAX_ALIAS_NODES}"
                              " nodes", ev.start_mark,
                              "use fewer or smaller anchors (&x / *x); this looks like an"
                              " alias bomb")
        else:
            continue
        if not isinstance(ev, yaml.CollectionEndEvent):
            total += n
            if total > MAX_YAML_NODES:
                raise _refuse(source, f"has more than {MAX_YAML_NODES} values", ev.start_mark,
                              "a task YAML this big is not a task; keep data in files")
        if anchor:
            anchors[str(anchor)] = n
        if stack:
            stack[-1][1] += n


def _line_map(node: yaml.Node | None, source: str = "<yaml>") -> dict[Path, Any]:
    """Field path -> 1-based line. Also records, under ``("\0raw",) + path``, the source
    text of plain scalars in envs/secrets (so ``LR: 1.5e-4`` stays "1.5e-4").

    A node reached again through an alias is not walked again (its fields take the line of
    the alias): the composed graph shares aliased nodes, and walking it expanded is
    exponential in the nesting of anchors."""
    out: dict[Path, Any] = {}
    seen: set[int] = set()

    def walk(n: yaml.Node, p: Path) -> None:
        if len(p) > 1:
            if id(n) in seen:
                return
            seen.add(id(n))
        if isinstance(n, yaml.MappingNode):
            first: dict[str, int] = {}
            for k, v in n.value:
                key = k.value if isinstance(k, yaml.ScalarNode) else str(k.value)
                line = k.start_mark.line + 1
                if key in first and key != "<<":
                    # The last one wins, as in SkyPilot (PyYAML): a warning, not an error.
                    msg = (f"{source}: duplicate key '{fmt_path(p + (key,))}' at line {line}"
                           f" (first at line {first[key]}); the last one wins -- remove one"
                           " of them")
                    out.setdefault(_DUPS, []).append(msg)
                    warnings.warn(msg, stacklevel=2)
                first.setdefault(key, line)
                out[p + (key,)] = line
                if (len(p) == 1 and p[0] in ("envs", "secrets") and isinstance(v, yaml.ScalarNode)
                        and v.tag != "tag:yaml.org,2002:null"):
                    out[(_RAW,) + p + (key,)] = v.value
                walk(v, p + (key,))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                out[p + (i,)] = v.start_mark.line + 1
                walk(v, p + (i,))

    if node is not None:
        out[()] = node.start_mark.line + 1
        walk(node, ())
    return out


_RAW = "\0raw"
_DUPS: Path = ("\0duplicates",)  # line map entry: the duplicate-key warnings of the document


def _raw_scalars(d: Any, field: str, lines: LineMap | None) -> Any:
    """Replace int/float/bool env values by their YAML source text."""
    if not isinstance(d, dict) or not lines:
        return d
    out = {}
    for k, v in d.items():
        raw = lines.get((_RAW, field, k))
        out[k] = raw if isinstance(v, int | float) and isinstance(raw, str) else v
    return out


def _parse_yaml(text: str, source: str) -> list[tuple[Any, dict[Path, int]]]:
    try:
        check_text_bounds(text, source)
        docs = list(yaml.safe_load_all(text))
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise InvalidSpecError(
            f"invalid YAML in {source}: {problem}",
            line=(mark.line + 1) if mark is not None else None,
            hint="check indentation, quoting and ':' spacing near that line",
        ) from None
    return [(d, _line_map(n, source)) for d, n in zip(docs, nodes, strict=True)]


def _apply_overrides(base: dict[str, str | None], over: Mapping[str, str] | None
                     ) -> dict[str, str | None]:
    out = dict(base)
    for k, v in (over or {}).items():
        out[k] = str(v)
    return out


def _resolve_paths(d: dict[str, Any], base_dir: FsPath) -> None:
    wd = d.get("workdir")
    if isinstance(wd, str) and wd.strip():
        d["workdir"] = resolve_local(wd, base_dir)
    fms = d.get("file_mounts")
    if isinstance(fms, dict):
        new: dict[Any, Any] = {}
        for dst, src in fms.items():
            if isinstance(src, str) and not is_bucket_uri(src) and src.strip():
                src = resolve_local(src, base_dir)
            elif isinstance(src, dict) and "kind" not in src:
                s = src.get("source")
                if isinstance(s, str) and s.strip():
                    src = {**src, "source": resolve_local(s, base_dir)}
                elif isinstance(s, list):
                    src = {**src, "source": [resolve_local(x, base_dir) if isinstance(x, str)
                                             else x for x in s]}
            new[dst] = src
        d["file_mounts"] = new


def task_from_config(
    config: Any, *, env_overrides: Mapping[str, str] | None = None,
    secret_overrides: Mapping[str, str] | None = None, base_dir: FsPath | None = None,
    allow_missing_env: bool = False, lines: LineMap | None = None, prefix: Path = (),
) -> Task:
    """One YAML task mapping -> Task (what ``load_task`` does after parsing).

    ``lines`` maps field paths to YAML lines; ``prefix`` (e.g. ``("tasks", 1)``) is put in
    front of field paths in errors.
    """
    try:
        return _task_from_config(config, env_overrides, secret_overrides, base_dir,
                                 allow_missing_env, lines)
    except InvalidSpecError as e:
        if prefix:
            for one in flatten(e):
                one.field = fmt_path(prefix) + (f".{one.field}" if one.field else "")
        raise


def _task_from_config(
    config: Any, env_overrides: Mapping[str, str] | None,
    secret_overrides: Mapping[str, str] | None, base_dir: FsPath | None,
    allow_missing_env: bool, lines: LineMap | None,
) -> Task:
    def err_at(p: Path, msg: str, hint: str | None = None) -> InvalidSpecError:
        return InvalidSpecError(msg, field=fmt_path(p) or None, hint=hint,
                                line=line_for(p, lines))

    if not isinstance(config, dict):
        raise err_at((), f"a task must be a mapping of fields, got {type(config).__name__}",
                     "see the SkyPilot task YAML reference")
    # Every mistake is collected (and the bad part left out), then reported together.
    errors: list[InvalidSpecError] = []
    for k in config:
        if k not in TASK_KEYS:
            s = suggest(str(k), TASK_KEYS)
            errors.append(err_at(
                (str(k),), f"unknown field '{k}'",
                f"did you mean '{s}'?" if s else f"valid fields: {', '.join(TASK_KEYS)}"))
    d = {k: v for k, v in config.items() if k in TASK_KEYS}
    base_dir = base_dir or FsPath(os.getcwd())
    try:
        envs = _apply_overrides(
            _scalars_each(_raw_scalars(d.get("envs"), "envs", lines), "envs", lines, errors),
            env_overrides)
        raw_secrets = d.get("secrets")
        secrets_dict = (_raw_scalars(raw_secrets, "secrets", lines)
                        if not isinstance(raw_secrets, list) else {})
        secrets = _apply_overrides(_scalars_each(secrets_dict, "secrets", lines, errors),
                                   secret_overrides)
        missing = [k for k, v in {**envs, **secrets}.items() if v is None]
        for k in missing if not allow_missing_env else ():
            kind = "secrets" if k in secrets and secrets[k] is None else "envs"
            flag = "--secret" if kind == "secrets" else "--env"
            errors.append(err_at(
                (kind, k), f"{k} is required (declared null) but no value was given",
                f"pass {flag} {k}=... (or put it in an env file and use {flag}-file)"))
        d["envs"] = envs
        if not isinstance(raw_secrets, list):
            d["secrets"] = secrets
        elif secret_overrides:
            d["managed_secrets"] = list(d.get("managed_secrets") or []) + raw_secrets
            d["secrets"] = secrets
        env_map = {k: v for k, v in {**envs, **secrets}.items() if v is not None}
        keep = frozenset(missing)
        for f in SUBST_FIELDS:
            if d.get(f) is not None:
                # In resources only defined variables are substituted: SkyPilot keeps other
                # `$` text (an OCI shape like VM.Standard.E4.Flex$_2_16) as written.
                d[f] = substitute_tree(d[f], env_map, (f,), keys=(f == "file_mounts"),
                                       keep=keep, lines=lines, lenient=(f == "resources"),
                                       errors=errors)
        _resolve_paths(d, base_dir)
        if "resources" in d and d["resources"] is not None:
            try:
                cands, ordered = expand_resources(d["resources"], path=("resources",),
                                                  lines=lines)
                d["resources"] = cands
                d["resources_ordered"] = ordered
            except InvalidSpecError as e:
                errors.append(e)
                d.pop("resources")
        task = Task.model_validate(d, context={"unresolved": keep})
    except ValidationError as e:
        errors.extend(convert_validation_errors(e, (), lines))
    except PydanticCustomError as e:
        errors.append(custom_to_spec(e, (), lines))
    if errors:
        raise combine(errors)
    return task


def _scalars_each(v: Any, what: str, lines: LineMap | None,
                  errors: list[InvalidSpecError]) -> dict[str, str | None]:
    """envs/secrets -> strings, one entry at a time: each bad entry is an error of its own
    (recorded in ``errors``) and is left out."""
    if not isinstance(v, dict):
        try:
            return str_scalars(v, what, True)
        except PydanticCustomError as e:
            errors.append(custom_to_spec(e, (what,), lines))
            return {}
    out: dict[str, str | None] = {}
    for k, val in v.items():
        try:
            out.update(str_scalars({k: val}, what, True))
        except PydanticCustomError as e:
            errors.append(custom_to_spec(e, (what,), lines))
    return out


def _read(source: str | os.PathLike[str], text: str | None) -> tuple[str, str, FsPath]:
    if text is not None:
        return text, str(source), FsPath(os.getcwd())
    p = FsPath(source).expanduser()
    try:
        return p.read_text(), str(p), p.resolve().parent
    except FileNotFoundError:
        raise InvalidSpecError(f"no such file: {str(p)!r}", hint="check the path to the task YAML"
                               ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidSpecError(f"cannot read {str(p)!r}: {e}") from None


def load_dag(
    source: str | os.PathLike[str], *, text: str | None = None,
    env_overrides: Mapping[str, str] | None = None,
    secret_overrides: Mapping[str, str] | None = None, base_dir: FsPath | None = None,
    allow_missing_env: bool = False, task_secrets: Sequence[Mapping[str, str]] = (),
) -> Dag:
    """Load a task YAML (one document = one task; several ``---`` documents = a chain).

    ``text`` given: parse it, ``source`` is only its display name, and relative paths
    resolve against ``base_dir`` or the cwd. Otherwise read ``source``; relative paths
    resolve against the YAML's directory. ``env_overrides``/``secret_overrides`` are
    ``--env``/``--secret`` (they win over the YAML). ``allow_missing_env``: envs declared
    ``null`` may stay unset (``Task.required_envs()`` lists them) -- for ``validate``.
    ``task_secrets``: per task, the secret values ``split_yaml_secrets`` took out of the
    text (``secret_overrides`` win over them).
    """
    try:
        return _load_dag(source, text, env_overrides, secret_overrides, base_dir,
                         allow_missing_env, task_secrets)
    except RecursionError:
        raise InvalidSpecError(f"{source}: the task nests too deeply",
                               hint="flatten the structure") from None


def _load_dag(
    source: str | os.PathLike[str], text: str | None, env_overrides: Mapping[str, str] | None,
    secret_overrides: Mapping[str, str] | None, base_dir: FsPath | None,
    allow_missing_env: bool, task_secrets: Sequence[Mapping[str, str]] = (),
) -> Dag:
    body, display, default_dir = _read(source, text)
    base = FsPath(base_dir) if base_dir is not None else default_dir
    docs = [(d, lm) for d, lm in _parse_yaml(body, display) if d is not None]
    if not docs:
        raise InvalidSpecError(f"{display} has no task in it", hint="add at least run: ...")
    errors: list[InvalidSpecError] = []
    header: dict[str, Any] = {}
    header_lines: LineMap | None = None
    if _is_header(docs[0][0], len(docs)):
        header_lines = docs[0][1]
        header = _parse_header(docs[0][0], header_lines, errors)
        docs = docs[1:] or [({"name": header.get("name")}, header_lines)]
    group = header.get("execution") == "parallel"
    multi = len(docs) > 1
    tasks: list[Task] = []
    for i, (d, lm) in enumerate(docs):
        prefix: Path = ("tasks", i) if multi else ()
        try:
            task = task_from_config(
                d, env_overrides=env_overrides,
                secret_overrides=_task_secret_overrides(task_secrets, i, secret_overrides),
                base_dir=base, allow_missing_env=allow_missing_env, lines=lm, prefix=prefix)
        except InvalidSpecError as e:
            errors.append(e)
            continue
        dups: Any = lm.get(_DUPS)
        note_load(task, list(dups or ()), lm)
        if group:
            _check_group_task(task, i, [t.name for t in tasks], prefix, lm, errors)
        tasks.append(task)
    if not errors:
        _check_references(header, tasks, header_lines, errors)
    if errors:
        raise combine(errors, display)
    edges = ([] if group or len(tasks) == 1
             else [(i, i + 1) for i in range(len(tasks) - 1)])
    return Dag(tasks, edges, header.get("name"), execution=header.get("execution"),
               primary_tasks=header.get("primary_tasks"),
               termination_delay=header.get("termination_delay"),
               inter_connection=header.get("inter_connection"))


# The first document that is not a task (SkyPilot's dag_utils): a pipeline header (only
# `name:`, or `name:` + `execution: serial`) or a job group header (`execution: parallel`
# in the first of several documents, with its options).
GROUP_KEYS: tuple[str, ...] = ("name", "execution", "primary_tasks", "termination_delay",
                               "inter_connection")
EXECUTIONS: tuple[str, ...] = ("serial", "parallel")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def _is_header(doc: Any, n_docs: int) -> bool:
    return isinstance(doc, dict) and is_header_keys(set(doc), n_docs)


def is_header_keys(keys: set[Any], n_docs: int) -> bool:
    """Whether a first document with these keys is a pipeline/job-group header."""
    return keys in ({"name"}, {"name", "execution"}) or (n_docs > 1 and "execution" in keys)


def _parse_header(doc: dict[str, Any], lines: LineMap, errors: list[InvalidSpecError]
                  ) -> dict[str, Any]:
    """The header document -> {name, execution, primary_tasks, termination_delay, ...}."""
    def err(p: Path, msg: str, hint: str | None = None) -> None:
        errors.append(InvalidSpecError(msg, field=fmt_path(p), hint=hint,
                                       line=line_for(p, lines)))

    out: dict[str, Any] = {}
    ex = doc.get("execution")
    if ex is not None:
        if not isinstance(ex, str) or ex.strip().lower() not in EXECUTIONS:
            err(("execution",), f"bad execution {ex!r}",
                "serial (a pipeline: one task after another) or parallel (a job group: "
                "all tasks at once)")
        else:
            out["execution"] = ex.strip().lower()
    group = out.get("execution") == "parallel"
    name = doc.get("name")
    if name is not None and not isinstance(name, str | int | float):
        err(("name",), "the DAG name must be a string")
    elif name is not None:
        out["name"] = str(name)
    if group and not (out.get("name") and _SAFE_NAME.match(out["name"])):
        err(("name",), "a job group needs a name of letters, digits, '-' and '_'"
            if name is not None else "a job group header needs a name",
            "e.g. name: my-job-group")
    for k in doc:
        if k in GROUP_KEYS:
            if not group and k not in ("name", "execution"):
                err((str(k),), f"{k} applies to a job group only",
                    "add execution: parallel to the header, or drop the field")
            continue
        s = suggest(str(k), GROUP_KEYS)
        if group:  # SkyPilot ignores them, with a warning
            warnings.warn(f"unknown field '{k}' in the job group header is ignored"
                          + (f" (did you mean '{s}'?)" if s else ""), stacklevel=3)
        else:
            err((str(k),), f"unknown field '{k}' in the header document",
                (f"did you mean '{s}'? " if s else "")
                + f"a header holds only {', '.join(GROUP_KEYS)}; task fields go in the "
                "task documents after it")
    if not group:
        return out
    pt = doc.get("primary_tasks")
    if pt is not None:
        if isinstance(pt, str):
            pt = [pt]
        if not isinstance(pt, list) or not all(isinstance(x, str) and x for x in pt):
            err(("primary_tasks",), "primary_tasks must be a list of task names",
                "e.g. primary_tasks: [trainer]")
        elif pt:  # an empty list means every task is primary (as not giving it)
            out["primary_tasks"] = list(pt)
    td = doc.get("termination_delay")
    if td is not None:
        try:
            if isinstance(td, dict):
                out["termination_delay"] = {
                    str(k): _delay(v, ("termination_delay", str(k)), lines)
                    for k, v in td.items()}
            else:
                out["termination_delay"] = _delay(td, ("termination_delay",), lines)
        except InvalidSpecError as e:
            errors.append(e)
    ic = doc.get("inter_connection")
    if ic is not None:
        if not isinstance(ic, bool):
            err(("inter_connection",), f"inter_connection must be true or false, got {ic!r}")
        else:
            out["inter_connection"] = ic
    return out


def _check_group_task(task: Task, i: int, seen: list[str | None], prefix: Path,
                      lines: LineMap | None, errors: list[InvalidSpecError]) -> None:
    """A job group's task needs a unique, filesystem-safe name (as in SkyPilot)."""
    where = fmt_path(prefix + ("name",))
    if task.name is None:
        errors.append(InvalidSpecError(
            f"task {i + 1} of the job group has no name", field=where,
            line=line_for((), lines), hint="give every task of a job group a name: ..."))
    elif not _SAFE_NAME.match(task.name):
        errors.append(InvalidSpecError(
            f"bad task name {task.name!r} in a job group", field=where,
            line=line_for(("name",), lines), hint="use letters, digits, '-' and '_'"))
    elif task.name in seen:
        errors.append(InvalidSpecError(
            f"two tasks of the job group are named {task.name!r}", field=where,
            line=line_for(("name",), lines), hint="task names in a job group are unique"))


def _delay(v: Any, p: Path, lines: LineMap) -> int | float:
    """A duration: seconds, or '30s' / '5m' / '1h'."""
    try:
        return parse_duration(v, default_unit="s", what="termination_delay")
    except PydanticCustomError as e:
        raise custom_to_spec(e, p, lines) from None


def _check_references(header: dict[str, Any], tasks: list[Task], lines: LineMap | None,
                      errors: list[InvalidSpecError]) -> None:
    """primary_tasks and termination_delay keys must name tasks of the group."""
    names = [t.name for t in tasks]
    for key in ("primary_tasks", "termination_delay"):
        val = header.get(key)
        refs = val if key == "primary_tasks" else (
            [k for k in val if k != "default"] if isinstance(val, dict) else [])
        for ref in refs or []:
            if ref not in names:
                known = ", ".join(n for n in names if n) or "(no task has a name)"
                errors.append(InvalidSpecError(
                    f"{key} names {ref!r}, which is not a task of this group", field=key,
                    line=line_for((key,), lines), hint=f"task names: {known}"))


def _task_secret_overrides(task_secrets: Sequence[Mapping[str, str]], i: int,
                           over: Mapping[str, str] | None) -> Mapping[str, str] | None:
    if i >= len(task_secrets):
        return over
    return {**task_secrets[i], **(over or {})}


def load_task(source: str | os.PathLike[str], **kw: Any) -> Task:
    """Load a single-task YAML (several documents -> InvalidSpecError)."""
    dag = load_dag(source, **kw)
    if len(dag.tasks) != 1:
        raise InvalidSpecError(f"expected one task, {source} holds {len(dag.tasks)}",
                               hint="use load_dag for multi-document (chain) YAMLs")
    return dag.tasks[0]
