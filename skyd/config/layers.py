"""Where config comes from and how the layers merge (SkyPilot's order), with the file and
line of every key kept for messages and ``skyd config show``.

Layers, lowest first (SkyPilot 0.14's ``skypilot_config`` order, then skyd's own file):

1. the user file: ``$SKYPILOT_GLOBAL_CONFIG`` else ``~/.sky/config.yaml``;
2. the project file: ``$SKYPILOT_PROJECT_CONFIG`` else ``.sky.yaml`` in the caller's cwd;
3. ``--config``: one file path, or ``key.sub=value`` items;
4. the task's ``config:`` block;
5. skyd's ``$SKYD_CONFIG_DIR/config.yaml`` (skyd-only keys; what it sets wins).

``$SKYPILOT_CONFIG`` names one file used instead of layers 1-2 (as SkyPilot does).
A later layer overrides keys of an earlier one; mappings merge key by key, lists are
replaced — except ``kubernetes.pod_config``, merged as SkyPilot's ``merge_k8s_configs``
does (lists of named items merge by name, other lists append).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyd.errors import InvalidSpecError

Path_ = tuple[str, ...]
MAX_CONFIG_BYTES = 1 << 20


@dataclass
class Layer:
    """One source: its name (a path, ``--config``, ``task config:``) and its mapping, with
    the line of each key path."""

    source: str
    data: dict[str, Any]
    lines: dict[Path_, int] = field(default_factory=dict)
    kind: str = ""  # user | project | cli | task | skyd


class ConfigError(InvalidSpecError):
    """A config file or key is wrong (exit 2): names the file, the key and the line."""


def _key_lines(node: Any, prefix: Path_, out: dict[Path_, int]) -> None:
    import yaml

    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                p = (*prefix, str(k.value))
                out[p] = k.start_mark.line + 1
                _key_lines(v, p, out)


def check_bounds(text: str, source: str) -> None:
    """The task loader's guard (size, depth, alias expansion: a "billion laughs" is ~400
    bytes) run on any YAML text before it is composed."""
    from skyd.models.loader import check_text_bounds  # the one guard, shared

    check_text_bounds(text, source)


def safe_load_all(text: str, source: str) -> list[Any]:
    """YAML documents of untrusted text, bounded as the task loader bounds them."""
    import yaml

    try:
        check_bounds(text, source)
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InvalidSpecError(f"invalid YAML in {source}: {getattr(e, 'problem', None) or e}",
                               line=mark.line + 1 if mark is not None else None,
                               hint="check indentation, quoting and ':' spacing near that line"
                               ) from None


def parse_text(text: str, source: str, kind: str) -> Layer:
    """A YAML mapping (or nothing) -> Layer; anything else is a ConfigError."""
    import yaml

    try:
        check_bounds(text, source)
    except InvalidSpecError as e:
        raise ConfigError(e.message, line=e.line, hint=e.hint) from None
    except yaml.YAMLError:
        pass  # reported below with its line
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(f"{source} is not valid YAML: {getattr(e, 'problem', None) or e}",
                          line=mark.line + 1 if mark is not None else None,
                          hint="fix the YAML syntax (https://docs.skypilot.co/en/latest/reference/config.html)"
                          ) from None
    if data is None:
        return Layer(source, {}, {}, kind)
    if not isinstance(data, dict):
        raise ConfigError(f"{source} must be a mapping of keys, not a {type(data).__name__}",
                          hint="write e.g. `allowed_clouds: [aws, kubernetes]`")
    lines: dict[Path_, int] = {}
    _key_lines(node, (), lines)
    return Layer(source, data, lines, kind)


def read_file(path: str | os.PathLike[str], kind: str) -> Layer:
    p = Path(path).expanduser()
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}",
                          hint="fix the path, or unset the variable that names it") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {p} is larger than 1 MiB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {p} is not UTF-8 text") from None
    return parse_text(text, str(p), kind)


def parse_dotlist(items: list[str]) -> Layer:
    """``--config a.b=value`` items (values are YAML scalars), as SkyPilot's _parse_dotlist."""
    import yaml

    data: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise ConfigError(f"--config {item!r}: use KEY=VALUE (e.g. kubernetes.namespace=ml) "
                              "or one config file path", field="--config")
        try:
            v = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"--config {item!r}: the value is not valid YAML",
                              field="--config") from None
        d = data
        parts = key.split(".")
        for part in parts[:-1]:
            nxt = d.get(part)
            if not isinstance(nxt, dict):
                nxt = d[part] = {}
            d = nxt
        d[parts[-1]] = v
    return Layer("--config", data, {}, "cli")


def cli_layer(items: list[str] | None, cwd: str | None = None) -> Layer | None:
    """``--config``: one existing file, or KEY=VALUE items."""
    if not items:
        return None
    first = Path(items[0]).expanduser()
    if not first.is_absolute() and cwd:
        first = Path(cwd) / first
    if first.is_file():
        if len(items) != 1:
            raise ConfigError("cannot use several --config flags with a config file",
                              field="--config", hint="give one file, or KEY=VALUE items")
        return read_file(first, "cli")
    return parse_dotlist(items)


@dataclass(frozen=True)
class Sources:
    """What a request's config is made of: resolved by the caller (its environment and
    cwd), read by the daemon."""

    override: str | None = None  # $SKYPILOT_CONFIG: this one file instead of user + project
    user: str | None = None
    project: str | None = None
    cli: tuple[str, ...] = ()
    cwd: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"override": self.override, "user": self.user, "project": self.project,
                "cli": list(self.cli), "cwd": self.cwd}

    @classmethod
    def from_json(cls, d: Any) -> Sources:
        if d is None:
            return caller_sources(None, cwd=None)
        if not isinstance(d, dict):
            raise ConfigError("config must be a mapping of sources", field="config")
        cli = d.get("cli") or []
        if not isinstance(cli, list) or not all(isinstance(x, str) for x in cli):
            raise ConfigError("config.cli must be a list of strings", field="--config")
        for k in ("override", "user", "project", "cwd"):
            if d.get(k) is not None and not isinstance(d.get(k), str):
                raise ConfigError(f"config.{k} must be a path", field=f"config.{k}")
        return cls(d.get("override"), d.get("user"), d.get("project"), tuple(cli), d.get("cwd"))


def caller_sources(cli: list[str] | None, cwd: str | None = "") -> Sources:
    """The sources as this process sees them ($SKYPILOT_* variables, ~, cwd). A file named
    by a variable must exist (as in SkyPilot); default paths are used when present.
    ``cwd=None``: no project file (a daemon has no caller's directory)."""
    env = os.environ
    override = env.get("SKYPILOT_CONFIG")
    if override:
        p = Path(override).expanduser()
        if not p.is_file():
            raise ConfigError(f"SKYPILOT_CONFIG names {str(p)!r}, which does not exist",
                              field="SKYPILOT_CONFIG", hint="fix the path, or unset SKYPILOT_CONFIG")
        return Sources(override=str(p.resolve()), cli=tuple(cli or ()), cwd=cwd or None)
    here = Path(cwd or os.getcwd())
    user = _named_or_default("SKYPILOT_GLOBAL_CONFIG", Path.home() / ".sky" / "config.yaml")
    project = (None if cwd is None else
               _named_or_default("SKYPILOT_PROJECT_CONFIG", here / ".sky.yaml", base=here))
    return Sources(None, user, project, tuple(cli or ()), str(here) if cwd is not None else None)


def _named_or_default(var: str, default: Path, base: Path | None = None) -> str | None:
    raw = os.environ.get(var)
    if raw:
        p = Path(raw).expanduser()
        if not p.is_absolute() and base is not None:
            p = base / p
        if not p.is_file():
            raise ConfigError(f"{var} names {str(p)!r}, which does not exist",
                              field=var, hint=f"fix the path, or unset {var}")
        return str(p.resolve())
    return str(default.resolve()) if default.is_file() else None


def skyd_file() -> Path:
    from skyd import paths

    return paths.config_dir() / "config.yaml"


def read_layers(src: Sources) -> list[Layer]:
    """Every file layer of ``src`` (task config comes later), lowest first, skyd's last."""
    out: list[Layer] = []
    if src.override:
        out.append(read_file(src.override, "user"))
    else:
        if src.user:
            out.append(read_file(src.user, "user"))
        if src.project:
            out.append(read_file(src.project, "project"))
    cli = cli_layer(list(src.cli), src.cwd)
    if cli is not None:
        out.append(cli)
    sk = skyd_file()
    if sk.is_file():
        out.append(read_file(sk, "skyd"))
    return out


# -- merge -----------------------------------------------------------------------------------

_PATCH_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name",
               "volumeMounts": "mountPath", "env": "name", "ports": "containerPort",
               "imagePullSecrets": "name", "tolerations": None}


def merge_k8s(base: dict[str, Any], over: dict[str, Any]) -> None:
    """SkyPilot's ``merge_k8s_configs``: dicts merge, named lists merge by name, others append."""
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            merge_k8s(base[k], v)
        elif isinstance(v, list) and isinstance(base.get(k), list):
            key = _PATCH_KEYS.get(k)
            if key is None:
                base[k].extend(copy.deepcopy(v))
                continue
            for item in v:
                match = next((b for b in base[k] if isinstance(b, dict) and isinstance(item, dict)
                              and key in item and b.get(key) == item.get(key)), None)
                if k == "containers" and isinstance(item, dict) and "name" not in item and base[k]:
                    match = base[k][0]
                if match is not None and isinstance(item, dict):
                    merge_k8s(match, item)
                else:
                    base[k].append(copy.deepcopy(item))
        else:
            base[k] = copy.deepcopy(v)


def overlay(base: dict[str, Any], over: dict[str, Any], where: Path_ = ()) -> None:
    for k, v in over.items():
        p = (*where, k)
        if p in (("kubernetes", "pod_config"), ("kubernetes", "custom_metadata")) \
                and isinstance(v, dict) and isinstance(base.get(k), dict):
            merge_k8s(base[k], v)
        elif isinstance(v, dict) and isinstance(base.get(k), dict):
            overlay(base[k], v, p)
        else:
            base[k] = copy.deepcopy(v)


def leaf_paths(d: dict[str, Any], prefix: Path_ = ()) -> list[Path_]:
    """Key paths down to values (a dict value that is itself free-form counts as a leaf
    below the known depth: pod_config, labels, ...)."""
    out: list[Path_] = []
    for k, v in d.items():
        p = (*prefix, str(k))
        if isinstance(v, dict) and v and p not in _FREEFORM and len(p) < 3:
            out.extend(leaf_paths(v, p))
        else:
            out.append(p)
    return out


_FREEFORM: set[Path_] = {("aws", "labels"), ("gcp", "labels"), ("kubernetes", "pod_config"),
                         ("kubernetes", "custom_metadata"), ("slurm", "sbatch_options"),
                         ("slurm", "clusters"), ("workspaces",), ("plugins",)}
