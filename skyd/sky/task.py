"""SkyPilot's ``sky.Task``, ``sky.Resources`` and ``sky.Dag`` for scripts and admin
policies: thin objects over the task's YAML mapping (SkyPilot's schema), which skyd's
daemon parses and validates exactly as it parses a YAML file."""

from __future__ import annotations

import copy
import os
from typing import Any

from skyd.errors import InvalidSpecError

#: Resources keyword arguments SkyPilot 0.14 takes (sky.Resources.__init__).
RESOURCE_ARGS = (
    "infra", "cloud", "region", "zone", "instance_type", "cpus", "memory", "accelerators",
    "accelerator_args", "use_spot", "job_recovery", "disk_size", "disk_tier", "network_tier",
    "ports", "labels", "image_id", "autostop", "priority", "volumes", "any_of", "ordered",
)  # fmt: skip


class Resources:
    """``sky.Resources(infra="aws/us-east-1", accelerators="A100:8", use_spot=True, ...)``."""

    def __init__(self, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - set(RESOURCE_ARGS))
        if unknown:
            raise TypeError(f"Resources() got an unexpected keyword argument {unknown[0]!r} "
                            f"(SkyPilot's arguments: {', '.join(RESOURCE_ARGS)})")
        cloud = kwargs.pop("cloud", None)
        cloud = str(cloud) if cloud is not None else None  # "aws" or sky.AWS()
        region, zone = kwargs.pop("region", None), kwargs.pop("zone", None)
        if cloud is not None and kwargs.get("infra") is None:
            kwargs["infra"] = "/".join(str(x) for x in (cloud, region, zone) if x)
        elif region or zone:
            kwargs["infra"] = "/".join(str(x) for x in ("*", region, zone) if x)
        self._config = {k: v for k, v in kwargs.items() if v is not None}

    def __getattr__(self, name: str) -> Any:
        if name in RESOURCE_ARGS:
            if name == "cloud":
                infra = self._config.get("infra")
                return str(infra).split("/")[0] if infra else None
            return self._config.get(name)
        raise AttributeError(name)

    def copy(self, **override: Any) -> Resources:
        return Resources(**{**self._config, **override})

    def to_yaml_config(self) -> dict[str, Any]:
        return copy.deepcopy(self._config)

    @classmethod
    def from_yaml_config(cls, config: dict[str, Any] | None) -> Resources:
        cfg = dict(config or {})
        if "cloud" in cfg and "infra" not in cfg:
            pass
        return cls(**{k: v for k, v in cfg.items() if k in RESOURCE_ARGS})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Resources) and other._config == self._config

    def __hash__(self) -> int:
        return hash(repr(sorted(self._config.items(), key=lambda kv: kv[0])))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._config.items())
        return f"Resources({inner})"


class Task:
    """``sky.Task(name=..., setup=..., run=..., envs=..., workdir=..., num_nodes=...)``."""

    def __init__(self, name: str | None = None, *, setup: str | None = None,
                 run: str | None = None, envs: dict[str, str] | None = None,
                 secrets: dict[str, str | None] | None = None, workdir: str | None = None,
                 num_nodes: int | None = None, file_mounts: dict[str, Any] | None = None,
                 event_callback: str | None = None, config: dict[str, Any] | None = None,
                 volumes: dict[str, Any] | None = None) -> None:
        self._config: dict[str, Any] = {}
        for k, v in (("name", name), ("setup", setup), ("run", run), ("envs", envs),
                     ("secrets", secrets), ("workdir", workdir), ("num_nodes", num_nodes),
                     ("file_mounts", file_mounts), ("event_callback", event_callback),
                     ("config", config), ("volumes", volumes)):
            if v is not None:
                self._config[k] = copy.deepcopy(v)
        self.base_dir: str = os.getcwd()
        if Dag._stack:  # created inside `with sky.Dag():` — part of that pipeline
            Dag._stack[-1].add(self)

    # -- SkyPilot's constructors --------------------------------------------------------
    @classmethod
    def from_yaml_config(cls, config: dict[str, Any], env_overrides: Any = None,
                         secrets_overrides: Any = None) -> Task:
        if not isinstance(config, dict):
            raise InvalidSpecError("a task config must be a mapping", field="config")
        t = cls()
        t._config = copy.deepcopy(config)
        if env_overrides:
            t.update_envs(env_overrides)
        if secrets_overrides:
            t.update_secrets(secrets_overrides)
        return t

    @classmethod
    def from_yaml(cls, yaml_path: str | os.PathLike[str], env_overrides: Any = None,
                  secrets_overrides: Any = None) -> Task:
        import yaml

        from skyd.sdk.payloads import read_task_file
        p = os.path.abspath(os.path.expanduser(str(yaml_path)))
        docs = [d for d in yaml.safe_load_all(read_task_file(__import__("pathlib").Path(p),
                                                                str(yaml_path))) if d is not None]
        if len(docs) != 1:
            raise InvalidSpecError(f"{yaml_path} holds {len(docs)} tasks",
                                   hint="load pipelines with skyd.sky.Dag.from_yaml")
        t = cls.from_yaml_config(docs[0], env_overrides, secrets_overrides)
        t.base_dir = os.path.dirname(p)
        return t

    # -- accessors ----------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name in ("name", "setup", "run", "workdir", "num_nodes", "file_mounts",
                    "event_callback", "volumes", "service", "config"):
            return self.__dict__["_config"].get(name)
        if name in ("envs", "secrets"):
            return dict(self.__dict__["_config"].get(name) or {})
        raise AttributeError(name)

    @property
    def resources(self) -> set[Resources]:
        r = self._config.get("resources")
        if r is None:
            return {Resources()}
        alts = r.get("any_of") or r.get("ordered") if isinstance(r, dict) else None
        if alts:
            base = {k: v for k, v in r.items() if k not in ("any_of", "ordered")}
            return {Resources.from_yaml_config({**base, **a}) for a in alts}
        return {Resources.from_yaml_config(r)}

    def set_resources(self, resources: Resources | set[Resources] | list[Resources] | dict[str, Any]) -> Task:
        if isinstance(resources, dict):
            resources = Resources.from_yaml_config(resources)
        if isinstance(resources, Resources):
            self._config["resources"] = resources.to_yaml_config()
            return self
        items = list(resources)
        if not all(isinstance(r, Resources) for r in items):
            raise TypeError("set_resources() takes a Resources, or a set/list of Resources")
        if len(items) == 1:
            self._config["resources"] = items[0].to_yaml_config()
        else:
            key = "ordered" if isinstance(resources, list) else "any_of"
            self._config["resources"] = {key: [r.to_yaml_config() for r in items]}
        return self

    def set_resources_override(self, override: dict[str, Any]) -> Task:
        cur = self._config.get("resources") or {}
        self._config["resources"] = {**cur, **override}
        return self

    def set_file_mounts(self, file_mounts: dict[str, Any] | None) -> Task:
        self._config["file_mounts"] = dict(file_mounts or {})
        return self

    def update_file_mounts(self, file_mounts: dict[str, Any]) -> Task:
        self._config.setdefault("file_mounts", {}).update(file_mounts)
        return self

    def set_storage_mounts(self, storage_mounts: dict[str, Any] | None) -> Task:
        return self.update_file_mounts(dict(storage_mounts or {}))

    def update_envs(self, envs: dict[str, str] | list[tuple[str, str]]) -> Task:
        items = envs.items() if isinstance(envs, dict) else envs
        for k, v in items:
            if not isinstance(k, str):
                raise TypeError(f"update_envs(): env names are strings, got {k!r}")
            self._config.setdefault("envs", {})[k] = v
        return self

    def update_secrets(self, secrets: dict[str, str] | list[tuple[str, str]]) -> Task:
        items = secrets.items() if isinstance(secrets, dict) else secrets
        for k, v in items:
            self._config.setdefault("secrets", {})[k] = v
        return self

    def set_service(self, service: dict[str, Any] | None) -> Task:
        if service is None:
            self._config.pop("service", None)
        else:
            self._config["service"] = dict(service)
        return self

    def to_yaml_config(self) -> dict[str, Any]:
        return copy.deepcopy(self._config)

    def __rshift__(self, other: Task) -> Task:
        """``t1 >> t2`` inside ``with sky.Dag()``: t2 runs after t1 (a chain)."""
        return other

    def __repr__(self) -> str:
        return f"Task(name={self._config.get('name')!r})"


class Dag:
    """``with sky.Dag() as dag: ...`` — a chain of tasks (a pipeline)."""

    _stack: list[Dag] = []

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self.tasks: list[Task] = []

    def add(self, task: Task) -> None:
        self.tasks.append(task)

    def __enter__(self) -> Dag:
        Dag._stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        Dag._stack.pop()

    def __rshift__(self, other: Task) -> Task:
        return other

    def is_chain(self) -> bool:
        return True

    @classmethod
    def from_yaml(cls, path: str) -> Dag:
        import yaml

        docs = [d for d in yaml.safe_load_all(open(path).read()) if d is not None]
        dag = cls()
        if docs and set(docs[0]) == {"name"} and len(docs) > 1:
            dag.name = docs.pop(0)["name"]
        dag.tasks = [Task.from_yaml_config(d) for d in docs]
        for t in dag.tasks:
            t.base_dir = os.path.dirname(os.path.abspath(path))
        return dag

    def to_yaml_docs(self) -> list[dict[str, Any]]:
        head = [{"name": self.name}] if self.name and len(self.tasks) > 1 else []
        return head + [t.to_yaml_config() for t in self.tasks]
