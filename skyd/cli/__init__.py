"""The ``skyd`` command line: argparse, one module per command, a fast path that imports
nothing heavy (docs/README.md). Feature CLIs (``skyd.jobs.cli``, ``skyd.serve.cli``) use
the helpers below."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyd import face

_FACE = {
    "add_config_flag": "compat_flags",
    "add_secret_flags": "secret_flags",
    "add_task_flags": "compat_flags",
    "add_time_filters": "compat_flags",
    "ago": "output",
    "collect_envs": "compat_flags",
    "collect_overrides": "compat_flags",
    "collect_secrets": "secret_flags",
    "filter_by_time": "compat_flags",
    "follow_request": "progress",
    "get_client": "client",
    "latest_managed_job": "compat_flags",
    "print_async": "compat_flags",
    "print_json": "output",
    "print_table": "output",
    "sync_down_managed": "compat_flags",
    "task_flags_payload": "compat_flags",
    "wait_result": "progress",
}
__all__ = [
    "add_config_flag", "add_secret_flags", "add_task_flags", "add_time_filters", "ago",
    "collect_envs", "collect_overrides", "collect_secrets", "filter_by_time",
    "follow_request", "get_client", "latest_managed_job", "print_async", "print_json",
    "print_table", "sync_down_managed", "task_flags_payload", "wait_result",
]
__getattr__ = face.lazy(__name__, _FACE)

if TYPE_CHECKING:
    from skyd.cli.client import get_client
    from skyd.cli.compat_flags import (
        add_config_flag,
        add_task_flags,
        add_time_filters,
        collect_envs,
        collect_overrides,
        filter_by_time,
        latest_managed_job,
        print_async,
        sync_down_managed,
        task_flags_payload,
    )
    from skyd.cli.output import ago, print_json, print_table
    from skyd.cli.progress import follow_request, wait_result
    from skyd.cli.secret_flags import add_secret_flags, collect_secrets
