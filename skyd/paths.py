"""Where skyd keeps things. Stdlib and skyd.settings only: the CLI imports this on its
fast path.

- ``SKYD_HOME``: state (SQLite), logs, keys, sandboxes. Default ``$XDG_DATA_HOME/skyd``
  (``~/.local/share/skyd``).
- ``SKYD_SOCKET``: the daemon's Unix socket. Default ``$XDG_RUNTIME_DIR/skyd/skyd.sock`` when
  ``XDG_RUNTIME_DIR`` is set and no ``SKYD_HOME`` was given, else ``$SKYD_HOME/run/skyd.sock``.
  (An explicit ``SKYD_HOME`` keeps an instance fully isolated, as tests and benchmarks need.)
- ``SKYD_CONFIG_DIR``: user config (ssh_node_pools.yaml, config.yaml). Default
  ``$XDG_CONFIG_HOME/skyd`` (``~/.config/skyd``).
"""

from __future__ import annotations

import os
from pathlib import Path

from skyd import settings


def home() -> Path:
    env = settings.HOME.get()
    if env is not None:
        return env
    xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(xdg) / "skyd"


def config_dir() -> Path:
    env = settings.CONFIG_DIR.get()
    if env is not None:
        return env
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(xdg) / "skyd"


def cache_dir() -> Path:
    """Downloads shared by every skyd instance of this user (e.g. the node agent's Python
    3.8 dependency set): ``$SKYD_CACHE_DIR``, else ``$XDG_CACHE_HOME/skyd``."""
    env = settings.CACHE_DIR.get()
    if env is not None:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "skyd"


def socket_path() -> Path:
    env = settings.SOCKET.get()
    if env is not None:
        return env
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and not settings.HOME.is_set():
        return Path(runtime) / "skyd" / "skyd.sock"
    return home() / "run" / "skyd.sock"


def shared_socket_path() -> Path:
    """A shared daemon's second socket (``SKYD_SHARED_GROUP``), where the group's members
    reach it: ``SKYD_SHARED_SOCKET``, else ``/var/tmp/skyd-shared-<uid>/skyd.sock`` (a
    directory of its own: SKYD_HOME stays private)."""
    env = settings.SHARED_SOCKET.raw()
    if env:
        return Path(env).expanduser()
    base = "/var/tmp" if os.path.isdir("/var/tmp") else "/tmp"
    return Path(base) / f"skyd-shared-{os.getuid()}" / "skyd.sock"


def db_path() -> Path:
    return home() / "state.db"


def logs_dir() -> Path:
    return home() / "logs"


def request_log(request_id: str) -> Path:
    return logs_dir() / "requests" / f"{request_id}.log"


def daemon_log() -> Path:
    return logs_dir() / "daemon.log"


def sandboxes_dir() -> Path:
    """Where the `local` infra keeps one directory per node."""
    return home() / "local"


def pid_file() -> Path:
    return home() / "run" / "skyd.pid"
