"""skyd's config: SkyPilot's layered config and skyd's own keys, as one validated model.

Read once per request in the daemon (from the caller's sources, see :class:`Sources`),
activated for the request's task (:func:`activate`), and read by providers through
:func:`current` / :func:`section`. See docs/config.md.
"""

from __future__ import annotations

import contextvars
import copy
import threading
from dataclasses import dataclass, field
from typing import Any

from skyd.config.layers import ConfigError, Layer, Sources, caller_sources, overlay, read_layers

__all__ = ["Config", "ConfigError", "Sources", "activate", "caller_sources", "current",
           "docker_run_options", "load", "section"]


@dataclass
class Config:
    """The merged config: ``data`` (plain mapping), ``origin`` (key path -> "file:line"),
    and the layers it came from."""

    data: dict[str, Any] = field(default_factory=dict)
    origin: dict[tuple[str, ...], str] = field(default_factory=dict)
    layers: list[Layer] = field(default_factory=list)
    sources: Sources | None = None

    def get(self, *keys: str, default: Any = None) -> Any:
        d: Any = self.data
        for k in keys:
            if not isinstance(d, dict) or k not in d:
                return default
            d = d[k]
        return d

    def section(self, name: str) -> dict[str, Any]:
        sec = self.data.get(name)
        return copy.deepcopy(sec) if isinstance(sec, dict) else {}

    def allowed_clouds(self) -> set[str] | None:
        """None: every infra; else the names skyd uses (``k8s`` means ``kubernetes``)."""
        raw = self.data.get("allowed_clouds")
        if raw is None:
            return None
        return {"kubernetes" if c == "k8s" else str(c).lower() for c in raw}

    def with_task(self, task_config: dict[str, Any] | None, source: str = "task config:",
                  kind: str = "task") -> Config:
        """This config with a task's ``config:`` block merged above the CLI layer (and below
        skyd's own file, whose keys still win)."""
        if not task_config:
            return self
        if kind == "task":
            _check_task_keys(task_config)
        layer = Layer(source, task_config, {}, kind)
        validate_layer(layer)
        file_layers = [la for la in self.layers if la.kind != kind]
        pos = next((i for i, la in enumerate(file_layers) if la.kind == "skyd"), len(file_layers))
        return merge([*file_layers[:pos], layer, *file_layers[pos:]], self.sources)

    def with_volumes(self, volumes: dict[str, Any] | None) -> Config:
        """A task's ``volumes: {/mount/path: VOLUME}`` (Kubernetes PVCs, ``skyd volumes``)
        as a ``kubernetes.pod_config`` layer: each claim mounted in the pod's container."""
        if not volumes:
            return self
        vols, mounts = [], []
        for i, (path, vol) in enumerate(sorted(volumes.items())):
            claim = vol.get("name") if isinstance(vol, dict) else vol
            name = f"skyd-vol-{i}"
            vols.append({"name": name, "persistentVolumeClaim": {"claimName": str(claim)}})
            mounts.append({"name": name, "mountPath": str(path)})
        pod = {"spec": {"volumes": vols, "containers": [{"volumeMounts": mounts}]}}
        return self.with_task({"kubernetes": {"pod_config": pod}}, "task volumes:", kind="volumes")

    def with_data(self, data: dict[str, Any], source: str) -> Config:
        """A config replaced as a whole (an admin policy's mutated config)."""
        layer = Layer(source, data, {}, "policy")
        validate_layer(layer)
        return merge([layer], self.sources)


#: The keys a task's ``config:`` may set (SkyPilot 0.14's OVERRIDEABLE_CONFIG_KEYS_IN_TASK);
#: any other is refused, as SkyPilot refuses it.
TASK_KEYS: tuple[tuple[str, ...], ...] = (
    ("docker", "run_options"), ("nvidia_gpus", "disable_ecc"), ("ssh", "custom_metadata"),
    ("ssh", "pod_config"), ("ssh", "provision_timeout"), ("kubernetes", "custom_metadata"),
    ("kubernetes", "pod_config"), ("kubernetes", "provision_timeout"), ("kubernetes", "dws"),
    ("kubernetes", "kueue"), ("kubernetes", "quota"), ("kubernetes", "remote_identity"),
    ("kubernetes", "enable_docker"), ("kubernetes", "set_pod_resource_limits"),
    ("azure", "remote_identity"), ("azure", "vpc_name"), ("gcp", "vpc_name"),
    ("gcp", "subnet_names"), ("gcp", "managed_instance_group"), ("gcp", "enable_gvnic"),
    ("gcp", "enable_gpu_direct"), ("gcp", "placement_policy"), ("vast", "datacenter_only"),
    ("vast", "create_instance_kwargs"), ("slurm", "sbatch_options"), ("slurm", "quota"),
    ("slurm", "cpu_partition"), ("active_workspace",),
)  # fmt: skip


def _check_task_keys(task_config: dict[str, Any]) -> None:
    from skyd.config.layers import leaf_paths

    allowed = {".".join(k) for k in TASK_KEYS}
    for p in leaf_paths(task_config):
        if not any(".".join(p[:i]) in allowed for i in range(1, len(p) + 1)):
            raise ConfigError(
                "a task's config: cannot set this key (as in SkyPilot)", field="config." + ".".join(p),
                hint="set it in ~/.sky/config.yaml, .sky.yaml or --config; a task may set "
                     + ", ".join(sorted(allowed - {"active_workspace"})))


def _loc_line(layer: Layer, loc: tuple[Any, ...]) -> int | None:
    keys = tuple(str(x) for x in loc if isinstance(x, str))
    while keys:
        if keys in layer.lines:
            return layer.lines[keys]
        keys = keys[:-1]
    return None


def validate_layer(layer: Layer) -> None:
    """Check one layer against the schema; the first mistakes name key, file and line."""
    import pydantic

    from skyd.config.schema import SkyConfig

    try:
        SkyConfig.model_validate(layer.data)
    except pydantic.ValidationError as e:
        by_key: dict[str, list[Any]] = {}
        for err in e.errors():
            loc = tuple(x for x in err["loc"] if not _is_union_tag(x))
            by_key.setdefault(".".join(str(x) for x in loc), []).append((loc, err))
        errs = []
        for key, items in list(by_key.items())[:5]:
            loc, err = items[0]
            if err["type"] == "extra_forbidden":
                msg = "unknown key (not a SkyPilot or skyd config key)"
                hint = "remove it or fix its spelling (https://docs.skypilot.co/en/latest/reference/config.html)"
            else:
                wants = "; or ".join(dict.fromkeys(str(i[1]["msg"]) for i in items))
                msg = f"{wants}, got {err.get('input')!r}"
                hint = "see https://docs.skypilot.co/en/latest/reference/config.html"
            errs.append(ConfigError(f"{msg} in {layer.source}", field=key,
                                    line=_loc_line(layer, loc), hint=hint))
        if len(errs) == 1:
            raise errs[0] from None
        from skyd.errors import InvalidSpecErrors

        multi = InvalidSpecErrors(errs, source=layer.source)  # type: ignore[arg-type]
        raise multi from None


def _is_union_tag(x: Any) -> bool:
    # pydantic puts the union member's name in the loc ("str", "list[str]", "function-...")
    return isinstance(x, str) and (x[:1].islower() and ("[" in x or x in ("str", "int", "bool",
                                   "float", "dict", "list", "literal", "none"))
                                   or x.startswith(("function-", "literal[", "constrained-")))


def merge(layers: list[Layer], sources: Sources | None) -> Config:
    from skyd.config.layers import leaf_paths

    data: dict[str, Any] = {}
    origin: dict[tuple[str, ...], str] = {}
    for layer in layers:
        overlay(data, layer.data)
        for p in leaf_paths(layer.data):
            line = _loc_line(layer, p)
            origin[p] = f"{layer.source}:{line}" if line else layer.source
    cfg = Config(data, origin, list(layers), sources)
    if layers:
        validate_layer(Layer("the merged config", data, {}, "merged"))
    return cfg


_CACHE: dict[Any, Config] = {}
_CACHE_LOCK = threading.Lock()


def _stamp(src: Sources) -> tuple[Any, ...]:
    import os

    from skyd.config.layers import skyd_file

    out: list[Any] = [src]
    for p in (src.override, src.user, src.project, str(skyd_file()), *src.cli):
        try:
            st = os.stat(p) if p else None
            out.append((p, st.st_mtime_ns, st.st_size) if st else None)
        except OSError:
            out.append((p, None))
    return tuple(out)


def load(src: Sources | None = None) -> Config:
    """Read and validate every file layer of ``src`` (blocking: file reads). Cached until a
    file changes, so each request reads its files once."""
    if src is None:
        src = caller_sources(None, cwd=None)
    key = _stamp(src)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    layers = read_layers(src)
    for layer in layers:
        validate_layer(layer)
    cfg = merge(layers, src)
    with _CACHE_LOCK:
        if len(_CACHE) > 64:
            _CACHE.clear()
        _CACHE[key] = cfg
    return cfg


_CURRENT: contextvars.ContextVar[Config | None] = contextvars.ContextVar("skyd_config", default=None)


def activate(cfg: Config) -> contextvars.Token[Config | None]:
    """Make ``cfg`` the config of this task (and the tasks and threads it starts)."""
    return _CURRENT.set(cfg)


def current() -> Config:
    """The active request's config, else the daemon's own (user file + skyd's file)."""
    cfg = _CURRENT.get()
    return cfg if cfg is not None else load(None)


def section(name: str) -> dict[str, Any]:
    """The ``<name>:`` section of the active config (empty when absent)."""
    return current().section(name)


def docker_run_options() -> list[str]:
    """``docker.run_options`` as a list of arguments for ``docker run`` (SkyPilot accepts
    a string or a list of strings; each string is split shell-style)."""
    import shlex

    raw = current().get("docker", "run_options")
    if not raw:
        return []
    items = [raw] if isinstance(raw, str) else list(raw)
    out: list[str] = []
    for item in items:
        out.extend(shlex.split(str(item)))
    return out


def payload_config(payload: dict[str, Any]) -> Config:
    """The config of a request payload (its ``config`` sources; the daemon's own when absent)."""
    return load(Sources.from_json(payload.get("config")))
