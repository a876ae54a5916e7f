"""Every ``SKYD_*`` environment knob, named once: its type, default and what it does.

Code reads a knob through its object here (``settings.REFRESH_S.get()``), never through
``os.environ`` directly, so each knob has one parser and one meaning. Values are read at
call time (tests set and unset the environment freely). An empty value means unset. A
value that does not parse is the user's mistake: :class:`SettingError` names the variable
and what it takes, instead of a traceback from deep inside.

``docs/settings.md`` is generated from this module (``python -m skyd.settings``); a test
keeps the two in step. This module sits at the bottom of the layers: it imports nothing
of skyd but the error type.

The node agent runs as a zipapp holding only ``skyd.nodeagent`` and ``skyd.proto``, so it
reads its own knobs (``where="agent"`` below) from ``os.environ`` itself; they are listed
here so that every knob is documented in one place.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from skyd.errors import SkydError

T = TypeVar("T")

__all__ = ["KNOBS", "Knob", "SettingError", "knob", "markdown"]


class SettingError(SkydError):
    """A ``SKYD_*`` variable holds a value its knob cannot take."""


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(text)


def _path(text: str) -> Path:
    return Path(text).expanduser()


def _list(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


_KIND_HINT = {
    "str": "text", "int": "a whole number", "float": "a number", "bool": "1 or 0 (true/false)",
    "path": "a path", "list": "a comma-separated list",
}
_PARSERS: dict[str, Callable[[str], object]] = {
    "str": str, "int": int, "float": float, "bool": _bool, "path": _path, "list": _list,
}


class Knob(Generic[T]):
    """One ``SKYD_*`` variable. ``default`` is what :meth:`get` returns when it is unset
    (None: the reading code's own built-in, named in ``doc``). A plain class, not a
    dataclass: every CLI call imports this module, and dataclasses costs it ~15 ms."""

    __slots__ = ("_parse", "default", "doc", "group", "kind", "name", "where")

    def __init__(self, name: str, kind: str, default: T, doc: str, group: str,
                 where: str = "daemon", parse: Callable[[str], object] = str) -> None:
        self.name = name
        self.kind = kind
        self.default = default
        self.doc = doc
        self.group = group
        self.where = where  # daemon | client | agent (who reads it)
        self._parse = parse

    def __repr__(self) -> str:
        return f"Knob({self.name!r}, {self.kind!r}, default={self.default!r})"

    def raw(self) -> str | None:
        """The variable's text, or None when it is unset or empty."""
        value = os.environ.get(self.name)
        return value if value else None

    def is_set(self) -> bool:
        return self.raw() is not None

    def get(self) -> T:
        """The parsed value, or ``default`` when unset. SettingError when it does not parse."""
        text = self.raw()
        if text is None:
            return self.default
        try:
            return self._parse(text)  # type: ignore[return-value]
        except ValueError:
            raise SettingError(
                f"{self.name}={text!r} is not {_KIND_HINT[self.kind]}",
                hint=f"set {self.name} to {_KIND_HINT[self.kind]} ({self.doc.rstrip('.')}), "
                     "or unset it",
            ) from None

    def default_text(self) -> str:
        if self.default is None or self.default == "":
            return "-"
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        if isinstance(self.default, tuple):
            return ",".join(self.default) or "-"
        return str(self.default)


KNOBS: dict[str, Knob[object]] = {}


def _knob(name: str, kind: str, default: T, doc: str, group: str,
          where: str = "daemon") -> Knob[T]:
    if not name.startswith("SKYD_") or name in KNOBS:
        raise ValueError(f"bad or duplicate knob {name}")
    k: Knob[T] = Knob(name, kind, default, doc, group, where, _PARSERS[kind])
    KNOBS[name] = k  # type: ignore[assignment]
    return k


# -- where skyd keeps its files -------------------------------------------------------------
G = "Files and the daemon's address"
HOME: Knob[Path | None] = _knob(
    "SKYD_HOME", "path", None,
    "State directory (database, logs, clusters); default $XDG_DATA_HOME/skyd.", G, "client")
CONFIG_DIR: Knob[Path | None] = _knob(
    "SKYD_CONFIG_DIR", "path", None,
    "Configuration directory (config.yaml, contexts); default $XDG_CONFIG_HOME/skyd.", G,
    "client")
CACHE_DIR: Knob[Path | None] = _knob(
    "SKYD_CACHE_DIR", "path", None,
    "Downloads shared by every skyd of this user; default $XDG_CACHE_HOME/skyd.", G, "client")
SOCKET: Knob[Path | None] = _knob(
    "SKYD_SOCKET", "path", None,
    "The daemon's Unix socket; default $XDG_RUNTIME_DIR/skyd/skyd.sock, else "
    "$SKYD_HOME/run/skyd.sock.", G, "client")
HOST: Knob[str | None] = _knob(
    "SKYD_HOST", "str", None,
    "Use the daemon on this host (ssh://[user@]host[:port], or local) instead of the "
    "current context.", G, "client")
SSH_OPTS: Knob[str] = _knob(
    "SKYD_SSH_OPTS", "str", "", "Extra ssh(1) options (shell words) to reach SKYD_HOST.", G,
    "client")
SHARED_DIAL: Knob[bool] = _knob(
    "SKYD_SHARED_DIAL", "bool", False,
    "`skyd daemon dial-stdio` relays to another user's shared daemon and never starts one "
    "(the client sets it on the host).", G, "client")
NO_AUTOSTART: Knob[bool] = _knob(
    "SKYD_NO_AUTOSTART", "bool", False,
    "Never start a local daemon on demand (the client fails instead).", G, "client")
DEBUG: Knob[str] = _knob(
    "SKYD_DEBUG", "str", "", "Any value: the CLI prints tracebacks of internal errors.", G,
    "client")

# -- the daemon -----------------------------------------------------------------------------
G = "Daemon"
SHUTDOWN_GRACE: Knob[float] = _knob(
    "SKYD_SHUTDOWN_GRACE", "float", 10.0,
    "Seconds running requests get to finish when the daemon stops.", G)
EXTRA_PLUGINS: Knob[tuple[str, ...]] = _knob(
    "SKYD_EXTRA_PLUGINS", "list", (),
    "More plugin modules the daemon imports at start (tests).", G)
LOG_LEVEL: Knob[str] = _knob("SKYD_LOG_LEVEL", "str", "INFO", "The daemon's log level.", G)
LOG_STDERR: Knob[bool] = _knob(
    "SKYD_LOG_STDERR", "bool", False, "The daemon also logs to stderr.", G)
DISK_RESERVE: Knob[int] = _knob(
    "SKYD_DISK_RESERVE", "int", 1 << 20,
    "Bytes kept in reserve under SKYD_HOME so a full disk can still record failures.", G)
BODY_TIMEOUT: Knob[float] = _knob(
    "SKYD_BODY_TIMEOUT", "float", 30.0, "Seconds a client has to send a request body.", G)
HEADER_TIMEOUT: Knob[float] = _knob(
    "SKYD_HEADER_TIMEOUT", "float", 10.0,
    "Seconds a client has to send request headers (at least 0.5).", G)
MAX_CONNECTIONS: Knob[int] = _knob(
    "SKYD_MAX_CONNECTIONS", "int", 1024, "Open client connections the daemon accepts "
    "(at least 2).", G)
ONEFILE: Knob[str | None] = _knob(
    "SKYD_ONEFILE", "str", None,
    "Path of the one-file skyd executable a service unit runs (set by that build).", G)
REFRESH_S: Knob[float] = _knob(
    "SKYD_REFRESH_S", "float", 10.0, "Seconds between cluster status refreshes.", G)
SSH_CONFIG: Knob[str] = _knob(
    "SKYD_SSH_CONFIG", "str", "",
    "'off': do not write the ssh config entries for clusters (ssh <cluster>).", G)
SHARED_GROUP: Knob[str | None] = _knob(
    "SKYD_SHARED_GROUP", "str", None,
    "Share the daemon with the members of this Unix group (skyd daemon start --shared-group).", G)
ADMIN_GROUP: Knob[str | None] = _knob(
    "SKYD_ADMIN_GROUP", "str", None,
    "Members of this Unix group may act on every user's objects of a shared daemon.", G)
SHARED_SOCKET: Knob[Path | None] = _knob(
    "SKYD_SHARED_SOCKET", "path", None,
    "A shared daemon's socket for its group; default /var/tmp/skyd-shared-<uid>/skyd.sock.", G)

# -- managed jobs ---------------------------------------------------------------------------
G = "Managed jobs"
JOBS_BACKOFF: Knob[float | None] = _knob(
    "SKYD_JOBS_BACKOFF", "float", None,
    "First retry delay in seconds of a managed job's recovery (default: the strategy's).", G)
JOBS_POLL: Knob[float | None] = _knob(
    "SKYD_JOBS_POLL", "float", None,
    "Seconds between a job controller's status polls (default: the controller's).", G)
JOBS_SIM: Knob[bool] = _knob(
    "SKYD_JOBS_SIM", "bool", False,
    "Managed jobs run on simulated clusters (benchmarks, tests).", G)
JOBS_SIM_DURATION: Knob[float] = _knob(
    "SKYD_JOBS_SIM_DURATION", "float", 1.0, "Seconds a simulated job runs.", G)

# -- serving --------------------------------------------------------------------------------
G = "Serving"
SERVE_LB: Knob[str] = _knob(
    "SKYD_SERVE_LB", "str", "",
    "'aiohttp': the load balancer in Python instead of the fast one.", G)
SERVE_HOST: Knob[str] = _knob(
    "SKYD_SERVE_HOST", "str", "127.0.0.1", "Address the services' load balancers bind.", G)
SERVE_PROBE_INTERVAL: Knob[float] = _knob(
    "SKYD_SERVE_PROBE_INTERVAL", "float", 10.0, "Seconds between readiness probes.", G)
SERVE_QPS_WINDOW: Knob[float] = _knob(
    "SKYD_SERVE_QPS_WINDOW", "float", 60.0, "Seconds of requests the autoscaler averages.", G)
SERVE_PREEMPTION_MEMORY: Knob[float] = _knob(
    "SKYD_SERVE_PREEMPTION_MEMORY", "float", 1800.0,
    "Seconds a zone's spot preemption is remembered when placing replicas.", G)
SERVE_ACCESS_LOG_MAX: Knob[int] = _knob(
    "SKYD_SERVE_ACCESS_LOG_MAX", "int", 8 << 20, "Bytes of a service's access log kept.", G)

# -- nodes and transports -------------------------------------------------------------------
G = "Nodes and transports"
CONTAINER_RUNTIME: Knob[str] = _knob(
    "SKYD_CONTAINER_RUNTIME", "str", "", "Container runtime to use (docker, podman); default: "
    "the first found.", G)
SSH_MAX_CONNECTS: Knob[int] = _knob(
    "SKYD_SSH_MAX_CONNECTS", "int", 16, "SSH connections opened at once.", G)
SSH_STRICT_HOST_KEYS: Knob[bool] = _knob(
    "SKYD_SSH_STRICT_HOST_KEYS", "bool", False,
    "Refuse SSH hosts whose key is not already known.", G)
BWRAP: Knob[str] = _knob(
    "SKYD_BWRAP", "str", "",
    "Path of bwrap for local sandboxes; 'off' runs local jobs without one.", G)
LOCAL_NET: Knob[str] = _knob(
    "SKYD_LOCAL_NET", "str", "127.0.0.0/24",
    "Loopback network local nodes take their addresses from.", G)
NODE_READY_POLL_S: Knob[float] = _knob(
    "SKYD_NODE_READY_POLL_S", "float", 5.0, "Seconds between checks that a new VM is ready.", G)
PROVISION_TIMEOUT_S: Knob[float | None] = _knob(
    "SKYD_PROVISION_TIMEOUT_S", "float", None,
    "Seconds a provider has to bring nodes up (default: the provider's).", G)

# -- catalogs and providers -----------------------------------------------------------------
G = "Catalogs and providers"
CATALOG_DIR: Knob[Path | None] = _knob(
    "SKYD_CATALOG_DIR", "path", None, "Directory of catalog CSVs used instead of the "
    "bundled ones.", G, "client")
CLOUD_PLUGINS: Knob[str] = _knob(
    "SKYD_CLOUD_PLUGINS", "str", "",
    "More providers: name=module:Class, comma separated (tests, trials).", G, "client")
SSH_NODE_POOLS: Knob[Path | None] = _knob(
    "SKYD_SSH_NODE_POOLS", "path", None, "The SSH node pools file; default "
    "$SKYD_CONFIG_DIR/ssh_node_pools.yaml.", G)
SLURM_CONFIG: Knob[Path | None] = _knob(
    "SKYD_SLURM_CONFIG", "path", None, "The Slurm clusters file; default ~/.slurm/config.", G)
AWS_POLL_S: Knob[float] = _knob("SKYD_AWS_POLL_S", "float", 2.0, "AWS: seconds between "
                                "instance polls.", G)
AWS_SSH_PORT: Knob[int] = _knob("SKYD_AWS_SSH_PORT", "int", 22, "AWS: SSH port of "
                                "instances.", G)
AWS_CATALOG_REGIONS: Knob[tuple[str, ...]] = _knob(
    "SKYD_AWS_CATALOG_REGIONS", "list", (), "AWS: regions the catalog fetch covers.", G)
AWS_LOOPBACK_ONLY: Knob[bool] = _knob(
    "SKYD_AWS_LOOPBACK_ONLY", "bool", False,
    "AWS and S3 endpoints must be on 127.0.0.0/8 (the test suite sets it).", G)
GCP_PROJECT: Knob[str | None] = _knob(
    "SKYD_GCP_PROJECT", "str", None, "GCP: the project (before $GOOGLE_CLOUD_PROJECT).", G)
GCP_COMPUTE_URL: Knob[str | None] = _knob(
    "SKYD_GCP_COMPUTE_URL", "str", None, "GCP: Compute Engine API endpoint.", G)
GCP_OSLOGIN_URL: Knob[str | None] = _knob(
    "SKYD_GCP_OSLOGIN_URL", "str", None, "GCP: OS Login API endpoint.", G)
GCP_TOKEN_URL: Knob[str | None] = _knob(
    "SKYD_GCP_TOKEN_URL", "str", None, "GCP: OAuth token endpoint.", G)
GCP_SSH_PORT: Knob[int | None] = _knob(
    "SKYD_GCP_SSH_PORT", "int", None, "GCP: SSH port of instances (default: config, 22).", G)
GCP_POLL_S: Knob[float] = _knob("SKYD_GCP_POLL_S", "float", 2.0, "GCP: seconds between "
                                "operation polls.", G)
GCS_URL: Knob[str | None] = _knob(
    "SKYD_GCS_URL", "str", None, "Cloud Storage API endpoint.", G)
K8S_POLL_S: Knob[float] = _knob("SKYD_K8S_POLL_S", "float", 1.0, "Kubernetes: seconds "
                                "between pod polls.", G)
K8S_PENDING_TIMEOUT_S: Knob[float | None] = _knob(
    "SKYD_K8S_PENDING_TIMEOUT_S", "float", None,
    "Kubernetes: seconds a pod may stay Pending before the launch fails over.", G)
CRUSOE_CONFIG: Knob[Path | None] = _knob(
    "SKYD_CRUSOE_CONFIG", "path", None, "Crusoe: the credentials file; default "
    "~/.crusoe/config.", G)
CRUSOE_API_URL: Knob[str | None] = _knob(
    "SKYD_CRUSOE_API_URL", "str", None, "Crusoe: API endpoint.", G)
CRUSOE_SSH_PORT: Knob[int] = _knob("SKYD_CRUSOE_SSH_PORT", "int", 22, "Crusoe: SSH port.", G)
CRUSOE_POLL_S: Knob[float] = _knob("SKYD_CRUSOE_POLL_S", "float", 3.0, "Crusoe: seconds "
                                   "between polls.", G)
DO_API_URL: Knob[str | None] = _knob("SKYD_DO_API_URL", "str", None,
                                     "DigitalOcean: API endpoint.", G)
DO_SSH_PORT: Knob[int] = _knob("SKYD_DO_SSH_PORT", "int", 22, "DigitalOcean and AMD "
                               "Developer Cloud: SSH port.", G)
DO_POLL_S: Knob[float] = _knob("SKYD_DO_POLL_S", "float", 3.0, "DigitalOcean and AMD "
                               "Developer Cloud: seconds between polls.", G)
AMDDEVCLOUD_API_URL: Knob[str | None] = _knob(
    "SKYD_AMDDEVCLOUD_API_URL", "str", None, "AMD Developer Cloud: API endpoint.", G)
VULTR_API_URL: Knob[str | None] = _knob("SKYD_VULTR_API_URL", "str", None,
                                        "Vultr: API endpoint.", G)
VULTR_POLL_S: Knob[float] = _knob("SKYD_VULTR_POLL_S", "float", 3.0,
                                  "Vultr: seconds between polls.", G)
VULTR_SSH_PORT: Knob[int | None] = _knob("SKYD_VULTR_SSH_PORT", "int", None,
                                         "Vultr: SSH port (default: config, 22).", G)
HOTAISLE_API_URL: Knob[str | None] = _knob("SKYD_HOTAISLE_API_URL", "str", None,
                                           "Hot Aisle: API endpoint.", G)
HOTAISLE_POLL_S: Knob[float] = _knob("SKYD_HOTAISLE_POLL_S", "float", 3.0,
                                     "Hot Aisle: seconds between polls.", G)
HOTAISLE_SSH_PORT: Knob[int | None] = _knob("SKYD_HOTAISLE_SSH_PORT", "int", None,
                                            "Hot Aisle: SSH port (default: config, 22).", G)
RUNPOD_API_URL: Knob[str | None] = _knob("SKYD_RUNPOD_API_URL", "str", None,
                                         "RunPod: API endpoint.", G)
RUNPOD_POLL_S: Knob[float] = _knob("SKYD_RUNPOD_POLL_S", "float", 3.0,
                                   "RunPod: seconds between polls.", G)

# -- the node agent (read by the agent itself) ----------------------------------------------
G = "Node agent"
AGENT_DEPS_DIR: Knob[Path | None] = _knob(
    "SKYD_AGENT_DEPS_DIR", "path", None,
    "Directory of the agent's Python 3.8 dependency wheels (default: the cache).", G)
JOB_UMASK: Knob[str | None] = _knob(
    "SKYD_JOB_UMASK", "str", None, "Octal umask of jobs (set by the daemon for local "
    "nodes).", G, "agent")
JOB_WRAPPER: Knob[str | None] = _knob(
    "SKYD_JOB_WRAPPER", "str", None,
    "Command each job phase runs under (the local sandbox; set by skyd).", G, "agent")
FAKE_GPUS: Knob[str | None] = _knob(
    "SKYD_FAKE_GPUS", "str", None, "GPUs the agent reports instead of detecting, e.g. "
    "H100:2 (tests).", G, "agent")
LOG_LOW_WATER: Knob[int] = _knob(
    "SKYD_LOG_LOW_WATER", "int", 1 << 20,
    "Free bytes under which running jobs' logs are cut back.", G, "agent")
LOG_KEEP: Knob[int] = _knob(
    "SKYD_LOG_KEEP", "int", 256 << 10, "Bytes of run output a cut-back log keeps.", G, "agent")
RANK_LEASE_S: Knob[float] = _knob(
    "SKYD_RANK_LEASE_S", "float", 30.0,
    "Seconds the ranks of a multi-node job go on without word from each other: the head "
    "gives up on a worker it cannot reach, a worker ends ranks its head stopped asking about.",
    G, "agent")
del G

#: Variables skyd sets for the programs it runs (jobs, node agents, scripts): not knobs.
SET_BY_SKYD: dict[str, str] = {
    "SKYD_JOB_ID": "The job's id on its cluster (a job's environment).",
    "SKYD_TASK_ID": "The managed job's task id (a job's environment).",
    "SKYD_MANAGED_JOB_ID": "The managed job's id (a job's environment).",
    "SKYD_NODE_IPS": "The cluster's node addresses, one a line (`skyd shell`).",
    "SKYD_NODE_RANK": "This node's rank (`skyd shell`).",
    "SKYD_AGENT_TOKEN": "The node agent's token (the agent's environment, never a job's).",
    "SKYD_CLUSTER_TAG": "The cluster's tag on a RunPod pod.",
    "SKYD_RT": "The container runtime found before (the container start script).",
    "SKYD_WANT": "The container runtimes to try (the container start script).",
    "SKYD_BIN": "The skyd executable on a Kubernetes host's volume (the daemon pod).",
}


def knob(name: str) -> Knob[object]:
    """The knob named ``name`` (for code that keeps a knob's name as data, e.g. a provider's
    ``poll_env``). An unknown name is a programming error, caught by the tests."""
    try:
        return KNOBS[name]
    except KeyError:
        raise KeyError(f"{name} is not a knob of skyd.settings: add it there") from None


def markdown() -> str:
    """docs/settings.md: every knob, by group."""
    out = ["# Settings: the SKYD_* environment variables", "",
           "Generated from `skyd/settings.py` (`python -m skyd.settings > docs/settings.md`); "
           "a test keeps the two in step. An empty value means unset. Read by: `daemon` (the "
           "daemon and what it runs), `client` (the CLI and SDK too), `agent` (the node "
           "agent).", ""]
    groups: dict[str, list[Knob[object]]] = {}
    for k in KNOBS.values():
        groups.setdefault(k.group, []).append(k)
    for group, knobs in groups.items():
        out += [f"## {group}", "", "| Variable | Type | Default | Read by | What it does |",
                "|---|---|---|---|---|"]
        out += [f"| `{k.name}` | {k.kind} | `{k.default_text()}` | {k.where} | {k.doc} |"
                for k in knobs]
        out.append("")
    out += ["## Set by skyd (not knobs)", "", "| Variable | What it holds |", "|---|---|"]
    out += [f"| `{name}` | {doc} |" for name, doc in SET_BY_SKYD.items()]
    out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(markdown())
