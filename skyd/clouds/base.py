"""The contract every infra implements: catalog side (offerings) and provisioner side.

A `Cloud` says whether it is enabled (credentials / config present, possibly probed over
the network), what it can offer (catalog rows from CSV, or dynamic offerings for `local`,
`ssh` pools, `kubernetes`), which request features it cannot serve, and gives a
`Provisioner` that creates, queries, stops, starts and terminates the nodes of a cluster.
Everything is async and idempotent by cluster name; every object a provider creates
carries the cluster's tag. Each node runs a node agent (skyd.nodeagent);
`Provisioner.agent_endpoint` says how the daemon reaches it.

The lifecycle (docs/providers.md): the pipeline writes a `PartialHandle` (cloud, region,
zone, tag) to SQLite before `provision` is called; `provision` raises
`ResourcesUnavailableError` with a failover scope, or `CredentialsError` (blocks the whole
cloud); `forget(partial)` removes whatever an attempt that never produced a handle left.

Providers are listed once, in `skyd.cloudnames.PROVIDERS` (plus entry points and
$SKYD_CLOUD_PLUGINS); `get_cloud` loads them on first use.
"""

from __future__ import annotations

import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from skyd import settings
from skyd.clouds.offering import Offering

if TYPE_CHECKING:
    from skyd.transports.container_runtime import ContainerRequest


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
    tag: str = ""  # the tag/label on every object the provider created (empty: cluster name)

    @property
    def cluster_tag(self) -> str:
        return self.tag or self.cluster_name

    def partial(self) -> PartialHandle:
        return PartialHandle(self.cluster_name, self.cloud, self.region, self.zone, self.cluster_tag)

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


@dataclass(frozen=True)
class PartialHandle:
    """Where a provisioning attempt may have created something: written to SQLite (one
    transaction) before the provider's first create call, so a daemon killed mid-provision
    finds and removes it on restart (and `down` asks only this cloud)."""

    cluster_name: str
    cloud: str
    region: str | None
    zone: str | None
    tag: str

    def describe(self) -> str:
        return "/".join(p for p in (self.cloud, self.region, self.zone) if p)


@dataclass(frozen=True)
class ProvisionRequest:
    cluster_name: str
    num_nodes: int
    offering: Offering
    use_spot: bool
    disk_size: int | None = None  # GB; None: the provider's default
    ports: tuple[str, ...] = ()  # "8080", "10000-10010": opened at create time
    image_id: str | None = None  # for this region ("docker:<img>" for a container image)
    labels: tuple[tuple[str, str], ...] = ()
    # image_id docker:<img> on an infra that runs the task's container on its nodes
    # (docs/containers.md); None otherwise. Holds the registry login: never stored.
    container: ContainerRequest | None = field(default=None, compare=False, repr=False)
    token: str = ""
    tag: str = ""  # put on every object created (empty: the cluster name)
    # Set by the pipeline: a provider may report why the cluster is not up yet (e.g. a
    # scheduler's pending reason); shown as the INIT row's status reason.
    on_status: Callable[[str], Awaitable[None]] | None = field(default=None, compare=False, repr=False)
    user: str = ""  # who launched it (a shared daemon's caller): tagged skypilot-user

    @property
    def cluster_tag(self) -> str:
        return self.tag or self.cluster_name

    def tags(self) -> tuple[tuple[str, str], ...]:
        """The task's labels plus ``skypilot-user`` (as SkyPilot tags what a user launches);
        each provider makes the value valid by its own rules."""
        return (*self.labels, (USER_LABEL, self.user)) if self.user else self.labels

    def partial(self) -> PartialHandle:
        o = self.offering
        return PartialHandle(self.cluster_name, o.cloud, o.region, o.zone, self.cluster_tag)


USER_LABEL = "skypilot-user"  # the tag/label naming who launched a cluster (SkyPilot's key)

#: request feature -> the task field it comes from (what `Cloud.unsupported` may name).
FEATURE_FIELDS: dict[str, str] = {
    "spot": "resources.use_spot",
    "ports": "resources.ports",
    "disk_size": "resources.disk_size",
    "image_id": "resources.image_id",
    "docker_image": "resources.image_id",
    "labels": "resources.labels",
    "bucket_mounts": "file_mounts",
}


def requested_features(req: ProvisionRequest) -> set[str]:
    """The features of `FEATURE_FIELDS` a request uses (bucket mounts are the task's)."""
    used = set()
    if req.use_spot:
        used.add("spot")
    if req.ports:
        used.add("ports")
    if req.disk_size is not None:
        used.add("disk_size")
    if req.container is not None:  # docker:<img> run in a container on the nodes
        used.add("docker_image")
    elif req.image_id:
        used.add("image_id")
    if req.labels:
        used.add("labels")
    return used


# Node states a provisioner reports.
NODE_RUNNING = "running"
NODE_STOPPED = "stopped"
NODE_TERMINATED = "terminated"  # gone (includes preempted spot instances)
NODE_PREEMPTED = "preempted"
NODE_PENDING = "pending"
NODE_UNKNOWN = "unknown"


class Provisioner(ABC):
    """Creates and manages a cluster's nodes.

    `provision` raises `ResourcesUnavailableError(msg, scope=..., provider_message=...)` on
    capacity, quota, zone or request errors (scope "zone", "region", "cloud" or "stop"),
    and `CredentialsError` when the provider refuses the credentials (the cloud is blocked).
    It runs under a deadline (`Cloud.provision_timeout_s`): a cancelled attempt is followed
    by `forget`."""

    @abstractmethod
    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        """Create (or find again, by cluster tag) the nodes, wait for them, start their
        agents, and return the handle (with `tag=req.cluster_tag`)."""

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

    def node_shell(self, handle: ClusterHandle, rank: int) -> Any:
        """A ``skyd.transports.base.NodeShell`` for node `rank` (bucket MOUNT modes run
        rclone through it), or None where this provider offers none. Default: None."""
        return None

    async def forget(self, partial: PartialHandle) -> None:  # noqa: B027 - optional hook
        """Remove what an attempt that never produced a handle may have made at
        `partial`'s location (instances found by tag, hosts reserved, directories made).
        Idempotent; called after a failed or timed-out attempt, by `down` of a half-made
        cluster and by the daemon's leak pass. Default: nothing to clean."""

    async def open_ports(self, handle: ClusterHandle, ports: Sequence[str]) -> None:
        """Open `ports` ("8080", "9000-9010") on every node of a running cluster (serving).
        Default: this provider cannot."""
        from skyd.errors import InvalidSpecError

        raise InvalidSpecError(
            f"the {handle.cloud!r} infra cannot open ports",
            field="resources.ports",
            hint="launch on an infra that supports ports",
        )

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release connections (HTTP sessions, forwards, SSH)."""


#: GPU ids of one provider: ((canonical name, the provider's id, other spellings it uses), ...).
#: The id is what a create request carries; the other spellings are only read.
GpuIds = tuple[tuple[str, str, tuple[str, ...]], ...]
#: Internet egress: cumulative tiers ((upper bound in GB, $/GB), ...), the last bound inf.
EgressTiers = tuple[tuple[float, float], ...]

#: The facts every provider states on its `Cloud` class (no default: a provider that
#: forgets one is refused when its class is made, i.e. when its module is imported).
#: Central code (the solver's egress costs, the plan's minimum charges, the GPU-name
#: canonicaliser) asks the registry for them (:func:`provider_facts`).
REQUIRED_FACTS: dict[str, str] = {
    "egress_tiers": "internet egress $/GB leaving this infra, as cumulative tiers "
                    "((upper bound GB, $/GB), ...), e.g. ((math.inf, 0.0),) for free egress",
    "inter_region_per_gb": "$/GB between two regions of this infra (None: the internet rate)",
    "minimum_billing_minutes": "minutes billed at least per machine however short its life "
                               "(0.0 when billing is per second or minute)",
    "gpu_ids": "the provider's own GPU ids ((canonical name, provider id, other spellings), "
               "...); () when it names GPUs as skyd does",
}


class ProviderFactError(TypeError):
    """A provider class that does not state one of :data:`REQUIRED_FACTS` (a programming
    error of the provider, raised when its class is made)."""


def _check_facts(cls: Any) -> None:
    where = f"{cls.__module__}:{cls.__qualname__}"
    for fact, what in REQUIRED_FACTS.items():
        if not hasattr(cls, fact):
            raise ProviderFactError(
                f"provider {where} does not state the fact {fact!r} ({what}); "
                f"set `{fact}` on the Cloud class (docs/providers.md)")
    tiers = cls.egress_tiers
    if (not isinstance(tiers, tuple) or not tiers
            or not all(isinstance(t, tuple) and len(t) == 2 for t in tiers)
            or tiers[-1][0] != float("inf")):
        raise ProviderFactError(
            f"provider {where}: egress_tiers must be ((upper bound GB, $/GB), ...) ending "
            f"with an unbounded tier (math.inf), got {tiers!r}")
    ir, mins = cls.inter_region_per_gb, cls.minimum_billing_minutes
    if ir is not None and (isinstance(ir, bool) or not isinstance(ir, int | float) or ir < 0):
        raise ProviderFactError(f"provider {where}: inter_region_per_gb must be $/GB >= 0 or "
                                f"None, got {ir!r}")
    if isinstance(mins, bool) or not isinstance(mins, int | float) or mins < 0:
        raise ProviderFactError(f"provider {where}: minimum_billing_minutes must be minutes "
                                f">= 0, got {mins!r}")
    gpu_ids = cls.gpu_ids
    if not isinstance(gpu_ids, tuple) or not all(
            isinstance(g, tuple) and len(g) == 3 and isinstance(g[2], tuple) for g in gpu_ids):
        raise ProviderFactError(
            f"provider {where}: gpu_ids must be ((canonical, provider id, (spellings...)), ...), "
            f"got {gpu_ids!r}")


@dataclass(frozen=True)
class SplitRows:
    """How a provider's catalog pairs GPU-only rows (no instance type) with the host machine
    types that carry them (GCP's catalog shape; skyd.clouds.catalog_csv)."""

    host_families: tuple[str, ...]  # machine types (prefixes) that are GPU hosts only
    gpu_hosts: dict[tuple[str, int], tuple[str, ...]]  # (accelerator, count) -> host types
    # (type, vCPUs, GiB, $/h, spot $/h) for accelerators with no host type in gpu_hosts
    fallback_host: tuple[str, float, float, float, float | None]
    # host types the files lack: type -> (vCPUs, GiB, $/h, spot $/h)
    missing_hosts: dict[str, tuple[float, float, float, float | None]] = field(default_factory=dict)


class Cloud(ABC):
    name: str = ""
    # -- provider facts (REQUIRED_FACTS): no default here; every provider states them ----
    egress_tiers: EgressTiers
    inter_region_per_gb: float | None
    minimum_billing_minutes: float
    gpu_ids: GpuIds
    #: features this infra does not support (keys of FEATURE_FIELDS), checked before
    #: provisioning: a candidate on this infra is skipped for a task that uses one.
    unsupported: frozenset[str] = frozenset()
    #: config keys (dotted, e.g. "aws.vpc_name") this provider acts on; a key a user sets
    #: that no provider (nor the core) declares is reported as not supported by skyd.
    config_keys: frozenset[str] = frozenset()
    #: deadline of one provisioning attempt (create + wait + agents), seconds;
    #: $SKYD_PROVISION_TIMEOUT_S overrides it for every cloud.
    provision_timeout_s: float = 900.0
    #: how long a `check` result is trusted before a launch probes again, seconds.
    check_ttl_s: float = 600.0
    #: image_id docker:<img> is the node's own image (a pod): no container is started on
    #: the node (ProvisionRequest.container stays None). docs/containers.md
    native_containers: bool = False
    #: the catalog lists GPU-only rows apart from host machine types (GCP): how to pair them.
    #: None: every row names its instance type (a GPU-only row is a format error).
    catalog_split_rows: SplitRows | None = None

    @abstractmethod
    async def check(self) -> tuple[bool, str]:
        """(enabled, reason). May use the network (a credential probe); the daemon caches
        the answer in SQLite (`skyd check` and stale launches refresh it)."""

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

    def attempt_timeout(self) -> float:
        override = settings.PROVISION_TIMEOUT_S.get()
        return override if override is not None else float(self.provision_timeout_s)

    async def close(self) -> None:
        """Release the provider's clients (the daemon calls it at shutdown)."""
        await self.provisioner().close()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_facts(cls)


# -- the registry: skyd.cloudnames lists the providers; factories load on first use --------

CloudFactory = Callable[[], Cloud]
_REGISTRY: dict[str, CloudFactory] = {}  # registered at run time (tests), win over specs
_INSTANCES: dict[str, Cloud] = {}


def register_cloud(name: str, factory: CloudFactory) -> None:
    """Register (or replace) a provider at run time; the next get_cloud makes a new one.
    A factory that is a class was checked for the provider facts when it was made."""
    from skyd.cloudnames import REGISTERED

    REGISTERED.add(name.lower())
    _REGISTRY[name] = factory
    _INSTANCES.pop(name, None)
    _FACTS.clear()


def _load_spec(name: str, spec: str) -> CloudFactory:
    from skyd.errors import SkydError

    module, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ProviderFactError) as e:
        raise SkydError(
            f"provider {name!r} ({spec}) failed to load: {e}",
            hint="fix or remove it (skyd.cloudnames, entry point skyd.clouds, $SKYD_CLOUD_PLUGINS)",
        ) from e
    return obj  # type: ignore[no-any-return]


def get_cloud(name: str) -> Cloud:
    from skyd.cloudnames import provider_specs
    from skyd.errors import InvalidSpecError

    if name not in _INSTANCES:
        factory = _REGISTRY.get(name)
        if factory is None:
            spec = provider_specs().get(name)
            if spec is None:
                raise InvalidSpecError(
                    f"infra {name!r} is not available in this build",
                    field="resources.infra",
                    hint="known: " + ", ".join(registered_clouds()),
                )
            factory = _load_spec(name, spec)
        _INSTANCES[name] = factory()
    return _INSTANCES[name]


@dataclass(frozen=True)
class ProviderFacts:
    """What central code needs to know of one infra (the values of REQUIRED_FACTS)."""

    egress_tiers: EgressTiers
    inter_region_per_gb: float | None
    minimum_billing_minutes: float
    gpu_ids: GpuIds


_FACTS: dict[tuple[str, str], ProviderFacts | None] = {}


def cloud_class(name: str) -> type[Cloud] | None:
    """The class of provider `name` (its module imported, nothing instantiated), None when
    this process has no such provider."""
    from skyd.cloudnames import provider_specs

    factory = _REGISTRY.get(name)
    if factory is None:
        spec = provider_specs().get(name)
        if spec is None:
            return None
        factory = _load_spec(name, spec)
    if isinstance(factory, type) and issubclass(factory, Cloud):
        return factory
    return type(get_cloud(name))  # a factory function: its product says


def provider_facts(name: str) -> ProviderFacts | None:
    """The facts of infra `name`: a provider's (its Cloud class), else those of a cloud
    skyd has a catalog for but no provider (:mod:`skyd.clouds.catalog_only`), else None."""
    key = (name, settings.CLOUD_PLUGINS.get())
    if key not in _FACTS:
        cls = cloud_class(name)
        if cls is not None:
            _FACTS[key] = ProviderFacts(**{f: getattr(cls, f) for f in REQUIRED_FACTS})
        else:
            from skyd.clouds.catalog_only import CATALOG_ONLY_FACTS

            _FACTS[key] = CATALOG_ONLY_FACTS.get(name)
    return _FACTS[key]


def registered_clouds() -> list[str]:
    """Every provider name this process knows (loaded or not)."""
    from skyd.cloudnames import provider_specs

    return sorted(set(provider_specs()) | set(_REGISTRY))


def loaded_clouds() -> list[Cloud]:
    return list(_INSTANCES.values())


async def close_clouds() -> None:
    """Close every loaded provider's clients (daemon shutdown); one failure does not stop
    the others."""
    for cloud in loaded_clouds():
        try:
            await cloud.close()
        except Exception:  # noqa: BLE001, S110 - shutting down: best effort
            pass


AsyncFn = Callable[[], Awaitable[None]]
