"""The contract every infra implements: catalog side (offerings) and provisioner side.

A `Cloud` says whether it is enabled (credentials / config present), what it can offer
(catalog rows from CSV, or dynamic offerings for `local`, `ssh` pools, `kubernetes`), and
gives a `Provisioner` that creates, queries, stops, starts and terminates the nodes of a
cluster. Everything is async and idempotent by cluster name. Each node runs a node agent
(skyd.nodeagent); `Provisioner.agent_endpoint` says how the daemon reaches it (a local
port, or an SSH port forward).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from skyd.clouds.offering import Offering

LogFn = Callable[[str], None]


@dataclass
class NodeHandle:
    rank: int
    instance_id: str
    internal_ip: str
    agent_port: int = 0  # the agent's port on the node itself
    node_dir: str = ""  # the agent's home on the node (sandbox dir on `local`)
    external_ip: str | None = None
    ssh: dict[str, Any] | None = None  # {host, port, user, identity_file, proxy_jump} for ssh
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClusterHandle:
    cluster_name: str
    cloud: str
    region: str | None
    zone: str | None
    instance_type: str | None
    use_spot: bool
    accelerators: dict[str, float]
    num_nodes: int
    hourly_cost: float  # whole cluster, $/h
    nodes: list[NodeHandle]
    token: str  # per-cluster agent token: secret, never logged or shown
    cpus: float | None = None
    memory_gib: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def head(self) -> NodeHandle:
        return self.nodes[0]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ClusterHandle:
        d = json.loads(text)
        d["nodes"] = [NodeHandle(**n) for n in d["nodes"]]
        return cls(**d)

    def public_dict(self) -> dict[str, Any]:
        """What status output may show: everything but the token."""
        d = asdict(self)
        d.pop("token", None)
        return d


@dataclass(frozen=True)
class ProvisionRequest:
    cluster_name: str
    num_nodes: int
    offering: Offering
    use_spot: bool
    disk_size: int | None = None
    ports: tuple[str, ...] = ()
    image_id: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    token: str = ""


# Node states a provisioner reports.
NODE_RUNNING = "running"
NODE_STOPPED = "stopped"
NODE_TERMINATED = "terminated"  # gone (includes preempted spot instances)
NODE_PREEMPTED = "preempted"
NODE_PENDING = "pending"
NODE_UNKNOWN = "unknown"


class Provisioner(ABC):
    """Creates and manages a cluster's nodes. Raises ResourcesUnavailableError on capacity,
    quota or zone errors with `block` set in its `extra` so failover can exclude it."""

    @abstractmethod
    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        """Create (or find again, by cluster name) the nodes and start their agents."""

    @abstractmethod
    async def query(self, handle: ClusterHandle) -> list[str]:
        """One NODE_* state per node, in rank order."""

    @abstractmethod
    async def stop(self, handle: ClusterHandle, log: LogFn) -> None: ...

    @abstractmethod
    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle: ...

    @abstractmethod
    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        """Remove every node and everything placed on it. Idempotent."""

    @abstractmethod
    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        """(host, port) where the daemon reaches node `rank`'s agent (after any forward)."""

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        """Restart agents that are not answering (after a node or agent crash). Default: no-op."""
        return handle

    @abstractmethod
    async def sync_dir(
        self, handle: ClusterHandle, rank: int, src: str, dst: str, excludes: list[str]
    ) -> tuple[int, int]:
        """Copy a local directory (or file) to node `rank` (dst relative to the node dir
        when not absolute). Returns (files, bytes) synced."""

    async def forget(self, cluster_name: str) -> None:  # noqa: B027 - optional hook
        """Clean up after a provisioning that died before it produced a handle (hosts
        reserved, directories made). Idempotent. Default: nothing to clean."""

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release connections (forwards, SSH)."""


class Cloud(ABC):
    name: str = ""
    #: features this infra does not support, checked before provisioning (e.g. "bucket_mounts")
    unsupported: frozenset[str] = frozenset()

    @abstractmethod
    def check(self) -> tuple[bool, str]:
        """(enabled, reason). Cheap: no network."""

    def dynamic_offerings(self) -> list[Offering] | None:
        """Offerings computed at plan time (local machine, ssh pools). None: use the catalog."""
        return None

    def max_nodes(self) -> int | None:
        """The most nodes one cluster on this infra can ever have (checked at plan time:
        `num_nodes` above it is refused, exit 2), or None when the provider decides."""
        return None

    def validate_location(self, region: str | None, zone: str | None) -> None:  # noqa: B027
        """Raise a SkydError naming the fix for a region/zone this infra can never have
        (e.g. an SSH pool name typo). Default: the catalog decides."""

    @abstractmethod
    def provisioner(self) -> Provisioner: ...


CloudFactory = Callable[[], Cloud]
_REGISTRY: dict[str, CloudFactory] = {}
_INSTANCES: dict[str, Cloud] = {}


def register_cloud(name: str, factory: CloudFactory) -> None:
    from skyd.cloudnames import REGISTERED

    REGISTERED.add(name.lower())
    _REGISTRY[name] = factory
    _INSTANCES.pop(name, None)


def get_cloud(name: str) -> Cloud:
    from skyd.errors import InvalidSpecError

    if name not in _INSTANCES:
        try:
            factory = _REGISTRY[name]
        except KeyError:
            raise InvalidSpecError(
                f"infra {name!r} is not available in this build",
                field="resources.infra",
                hint="known: " + ", ".join(sorted(_REGISTRY)),
            ) from None
        _INSTANCES[name] = factory()
    return _INSTANCES[name]


def registered_clouds() -> list[str]:
    return sorted(_REGISTRY)


AsyncFn = Callable[[], Awaitable[None]]
