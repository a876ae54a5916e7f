"""SkyPilot's admin-policy interface (``sky.AdminPolicy``, ``sky.UserRequest``,
``sky.MutatedUserRequest``): a policy class written for SkyPilot runs under skyd as is."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from skyd.sky.task import Task


class Config(dict):  # type: ignore[type-arg]
    """``sky.Config``: the SkyPilot config mapping, with get_nested / set_nested."""

    def get_nested(self, keys: tuple[str, ...], default_value: Any = None,
                   override_configs: dict[str, Any] | None = None) -> Any:
        d: Any = self
        if override_configs:
            from skyd.config.layers import overlay

            d = copy.deepcopy(dict(self))
            overlay(d, override_configs)
        for k in keys:
            if not isinstance(d, dict) or k not in d:
                return default_value
            d = d[k]
        return d

    def set_nested(self, keys: tuple[str, ...], value: Any) -> None:
        d: Any = self
        for k in keys[:-1]:
            if not isinstance(d.get(k), dict):
                d[k] = {}
            d = d[k]
        d[keys[-1]] = value

    def pop_nested(self, keys: tuple[str, ...], default_value: Any = None) -> Any:
        d: Any = self
        for k in keys[:-1]:
            if not isinstance(d.get(k), dict):
                return default_value
            d = d[k]
        return d.pop(keys[-1], default_value)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Config:
        return cls(copy.deepcopy(dict(d or {})))


@dataclasses.dataclass
class RequestOptions:
    cluster_name: str | None
    idle_minutes_to_autostop: int | None
    down: bool
    dryrun: bool


@dataclasses.dataclass
class UserRequest:
    task: Task
    skypilot_config: Config
    request_name: str = "launch"
    request_options: RequestOptions | None = None
    at_client_side: bool = False
    user: Any = None
    client_api_version: int | None = None
    client_version: str | None = None


@dataclasses.dataclass
class MutatedUserRequest:
    task: Task
    skypilot_config: Config


class PolicyInterface:
    def apply(self, user_request: UserRequest) -> MutatedUserRequest:
        raise NotImplementedError


class AdminPolicy(PolicyInterface):
    """Subclass it and implement ``validate_and_mutate`` (a classmethod in SkyPilot)."""

    @classmethod
    def validate_and_mutate(cls, user_request: UserRequest) -> MutatedUserRequest:
        raise NotImplementedError("Your policy must implement validate_and_mutate")

    def apply(self, user_request: UserRequest) -> MutatedUserRequest:
        return self.validate_and_mutate(user_request)
