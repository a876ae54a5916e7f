"""``admin_policy``: SkyPilot's admin policy, applied to every task a request runs.

The runner sits with the policy interface it hands to the user's class (``skyd.sky``, above
``skyd.config``): the config only names the class; the pipeline calls :func:`apply`.

The config names an importable class (``admin_policy: my_pkg.MyPolicy``) implementing
SkyPilot's interface: ``validate_and_mutate(user_request) -> MutatedUserRequest``. It may
mutate the task and the config, or raise to reject the request (the message is shown,
exit 2). A policy module that does ``import sky`` gets :mod:`skyd.sky` when SkyPilot
itself is not installed, so a policy written for SkyPilot runs unchanged.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

from skyd.errors import InvalidSpecError
from skyd.sky.admin_policy import Config, RequestOptions, UserRequest
from skyd.sky.task import Task


def _alias_sky() -> None:
    if "sky" in sys.modules or importlib.util.find_spec("sky") is not None:
        return
    import skyd.sky as compat
    from skyd.sky import admin_policy

    sys.modules["sky"] = compat
    sys.modules["sky.admin_policy"] = admin_policy


def load_policy(spec: str) -> Any:
    if spec.startswith(("http://", "https://")):
        raise InvalidSpecError(f"admin_policy {spec!r}: a RESTful policy server is not supported "
                               "by skyd", field="admin_policy",
                               hint="name an importable class: admin_policy: my_pkg.MyPolicy")
    module, _, cls = spec.rpartition(".")
    if not module:
        raise InvalidSpecError(f"admin_policy {spec!r} must be module.ClassName",
                               field="admin_policy", hint="e.g. admin_policy: my_pkg.MyPolicy")
    _alias_sky()
    try:
        obj = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as e:
        raise InvalidSpecError(f"admin_policy {spec!r} cannot be imported: {e}",
                               field="admin_policy",
                               hint="install the policy's package where skyd runs, or fix the name"
                               ) from None
    if not callable(getattr(obj, "validate_and_mutate", None)):
        raise InvalidSpecError(f"admin_policy {spec!r} has no validate_and_mutate",
                               field="admin_policy",
                               hint="subclass sky.AdminPolicy and implement validate_and_mutate")
    return obj


def apply(spec: str, docs: list[dict[str, Any]], config_data: dict[str, Any], *,
          request_name: str, options: dict[str, Any] | None = None
          ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run the policy on each task document; (mutated documents, mutated config)."""
    policy = load_policy(spec)
    opts = RequestOptions(**options) if options is not None else None
    out: list[dict[str, Any]] = []
    cfg = Config.from_dict(config_data)
    for doc in docs:
        req = UserRequest(task=Task.from_yaml_config(doc), skypilot_config=Config.from_dict(cfg),
                          request_name=request_name, request_options=opts)
        try:
            res = policy.validate_and_mutate(req)
        except Exception as e:  # noqa: BLE001 - a rejection is the policy's message
            raise InvalidSpecError(f"rejected by admin_policy {spec}: {type(e).__name__}: {e}",
                                   field="admin_policy",
                                   hint="change the task to satisfy the policy, or ask its owner"
                                   ) from None
        task = getattr(res, "task", None)
        if task is None or not hasattr(task, "to_yaml_config") or not hasattr(res, "skypilot_config"):
            raise InvalidSpecError(f"admin_policy {spec}: validate_and_mutate returned "
                                   f"{type(res).__name__}, not a MutatedUserRequest",
                                   field="admin_policy")
        out.append(task.to_yaml_config())
        cfg = Config.from_dict(dict(res.skypilot_config or {}))
    return out, dict(cfg)
