"""One pydantic schema for every config key: SkyPilot 0.14's (``sky/utils/schemas.py``,
``get_config_schema``) plus skyd's own provider settings.

Keys skyd acts on are typed; keys SkyPilot has that skyd does not act on are listed by
name (any value; reported as "not supported by skyd", see :mod:`skyd.config.support`);
any other key is refused. Every model forbids extra keys, so a typo is an error naming it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    create_model,
    field_validator,
)

_CLOSED = ConfigDict(extra="forbid")
_OPEN = ConfigDict(extra="allow")

#: SkyPilot's cloud names (allowed_clouds), plus skyd's own infras.
SKYPILOT_CLOUDS = (
    "aws", "azure", "gcp", "ibm", "lambda", "scp", "oci", "kubernetes", "runpod", "vast",
    "vsphere", "cudo", "fluidstack", "paperspace", "primeintellect", "do", "nebius", "ssh",
    "slurm", "hyperbolic", "seeweb", "shadeform", "yotta", "mithril", "verda", "cloudflare",
    "coreweave", "vastdata", "huggingface",
)  # fmt: skip
#: the names skyd accepts beyond those: its aliases; every provider's own name comes from the
#: registry (skyd.cloudnames.provider_specs), test providers included.
SKYD_INFRAS = ("k8s",)

Num = StrictInt | StrictFloat
StrList = list[StrictStr]


class Model(BaseModel):
    model_config = _CLOSED


# -- sections skyd acts on (typed) -----------------------------------------------------------

class Docker(Model):
    run_options: StrictStr | StrList | None = None


class NvidiaGpus(Model):
    disable_ecc: StrictBool | None = None


class Aws(Model):
    # SkyPilot keys
    vpc_name: StrictStr | None = None
    vpc_names: StrictStr | StrList | None = None
    subnet_names: StrictStr | StrList | None = None
    use_internal_ips: StrictBool | None = None
    labels: dict[str, StrictStr] | None = None
    security_group_name: StrictStr | list[dict[str, StrictStr]] | None = None
    ssh_user: StrictStr | None = None
    remote_identity: StrictStr | list[dict[str, StrictStr]] | None = None
    prioritize_reservations: Any = None
    specific_reservations: Any = None
    disk_encrypted: Any = None
    ssh_proxy_command: Any = None
    use_ssm: Any = None
    post_provision_runcmd: Any = None
    enforce_tags: Any = None
    capabilities: Any = None
    # skyd's own
    placement_group: StrictBool | None = None


class Gcp(Model):
    vpc_name: StrictStr | None = None
    use_internal_ips: StrictBool | None = None
    labels: dict[str, StrictStr] | None = None
    subnet_names: Any = None
    force_enable_external_ips: Any = None
    specific_reservations: Any = None
    prioritize_reservations: Any = None
    managed_instance_group: Any = None
    remote_identity: Any = None
    enable_gvnic: Any = None
    enable_gpu_direct: Any = None
    placement_policy: Any = None
    ssh_proxy_command: Any = None
    capabilities: Any = None
    # skyd's own
    project_id: StrictStr | None = None
    network: StrictStr | None = None
    ssh_user: StrictStr | None = None
    ssh_port: StrictInt | None = None


class Kubernetes(Model):
    allowed_contexts: StrList | Literal["all"] | None = None
    namespace: StrictStr | None = None
    pod_config: dict[str, Any] | None = None
    provision_timeout: StrictInt | None = None
    autoscaler: Literal["gke", "karpenter", "coreweave", "nebius", "generic"] | StrictBool | None = None
    ports: Literal["ingress", "loadbalancer", "podip"] | None = None
    remote_identity: Any = None
    allowed_nodes: Any = None
    apt_mirrors: Any = None
    auto_mounts: Any = None
    context_configs: Any = None
    custom_metadata: Any = None
    dws: Any = None
    enable_docker: Any = None
    high_availability: Any = None
    kueue: Any = None
    max_inline_command_length: Any = None
    networking: Any = None
    post_provision_runcmd: Any = None
    pricing: Any = None
    quota: Any = None
    rdma: Any = None
    set_pod_resource_limits: Any = None
    # skyd's own
    pending_timeout_s: Num | None = None
    ports_service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] | None = None
    image: StrictStr | None = None
    image_amd: StrictStr | None = None
    image_cpu: StrictStr | None = None
    allow_spot: StrictBool | None = None


class Ssh(Model):
    allowed_node_pools: StrList | None = None
    context_configs: Any = None
    custom_metadata: Any = None
    max_inline_command_length: Any = None
    pod_config: Any = None
    provision_timeout: Any = None
    remote_identity: Any = None


class Slurm(Model):
    allowed_clusters: Any = None
    cluster_configs: Any = None
    container_mounts: Any = None
    cpu_partition: Any = None
    gpu_partition_map: Any = None
    pricing: Any = None
    prometheus: Any = None
    provision_timeout: Any = None
    quota: Any = None
    remote_identity: Any = None
    sbatch_options: dict[str, Any] | None = None
    submit_as_user: Any = None
    username_map: Any = None
    # skyd's own
    clusters: dict[str, dict[str, Any]] | None = None


class StatusCheck(Model):
    min_elapsed_seconds: Num | None = Field(default=None, ge=0)
    min_retries: StrictInt | None = Field(default=None, ge=0)


class Controller(Model):
    consolidation_mode: StrictBool | None = None
    high_availability: StrictBool | None = None
    resources: Any = None
    autostop: Any = None
    controller_logs_gc_retention_hours: Any = None
    task_logs_gc_retention_hours: Any = None


class Jobs(Model):
    controller: Controller | None = None
    bucket: Any = None
    force_disable_cloud_bucket: Any = None
    status_check: StatusCheck | None = None


class Serve(Model):
    controller: Controller | None = None
    bucket: Any = None
    force_disable_cloud_bucket: Any = None


def _named(name: str, keys: tuple[str, ...], **typed: Any) -> type[BaseModel]:
    """A section whose keys skyd only knows by name (any value)."""
    fields: dict[str, Any] = {k: (Any, None) for k in keys}
    fields.update(typed)
    return create_model(name, __config__=_CLOSED, **fields)  # type: ignore[call-overload,no-any-return]


# skyd's own provider sections (API keys, images, ports)
_Neo = _named("Neocloud", ("api_key", "team", "ssh_port", "os_id", "region", "image", "token"))

Azure = _named("Azure", ("capabilities", "labels", "remote_identity", "resource_group_vm",
                         "ssh_proxy_command", "storage_account", "use_internal_ips", "vpc_name"))
Oci = _named("Oci", ("region_configs", "remote_identity"))
Vast = _named("Vast", ("create_instance_kwargs", "datacenter_only", "remote_identity"))
Nebius = _named("Nebius", ("disk_encrypted", "domain", "region_configs", "remote_identity",
                           "security_group_name", "ssh_proxy_command", "tenant_id",
                           "use_internal_ips", "use_personal_pricing", "use_static_ip_address"))
ApiServer = _named("ApiServer", (
    "cluster_debug_event_retention_hours", "cluster_event_retention_hours",
    "cluster_terminal_event_retention_hours", "daemon_log_max_bytes", "endpoint",
    "launch_attempt_retention_hours", "logs_retention_hours", "requests_retention_hours",
    "service_account_token"))  # fmt: skip
WorkspaceConfig = _named("WorkspaceConfig", ("read_access",))
Provision = _named("Provision", ("install_conda", "ssh_timeout"))
Rbac = _named("Rbac", ("default_role", "restrict_config_to_admins", "roles"))
Logs = _named("Logs", ("aws", "gcp", "store"))
Daemons = _named("Daemons", (
    "expired-token-cleanup-daemon", "launch-metrics-daemon", "pool-status-refresh-daemon",
    "server-heartbeat-daemon", "sky-serve-status-refresh-daemon",
    "skypilot-status-refresh-daemon", "skypilot-volume-status-refresh-daemon"))  # fmt: skip
Data = _named("Data", ("mount_cached",))
Dashboard = _named("Dashboard", ("external_links",))
Metrics = _named("Metrics", ("prometheus",))

def _check_clouds(v: list[str] | None) -> list[str] | None:
    from skyd.cloudnames import provider_specs

    known = set(SKYPILOT_CLOUDS) | set(SKYD_INFRAS) | set(provider_specs())
    for c in v or []:
        if c.lower() not in known:
            raise ValueError(f"unknown cloud {c!r} (known: {', '.join(sorted(known))})")
    return v


class SkyConfig(Model):
    """The whole merged config (every layer validates against it too)."""

    allowed_clouds: list[StrictStr] | None = None
    admin_policy: StrictStr | None = None
    docker: Docker | None = None
    nvidia_gpus: NvidiaGpus | None = None
    aws: Aws | None = None
    gcp: Gcp | None = None
    kubernetes: Kubernetes | None = None
    ssh: Ssh | None = None
    slurm: Slurm | None = None
    jobs: Jobs | None = None
    serve: Serve | None = None
    # SkyPilot keys skyd knows by name only
    workspace: Any = None
    db: Any = None
    active_workspace: Any = None
    workspaces: Any = None
    plugins: Any = None
    api_server: ApiServer | None = None  # type: ignore[valid-type]
    workspace_config: WorkspaceConfig | None = None  # type: ignore[valid-type]
    provision: Provision | None = None  # type: ignore[valid-type]
    rbac: Rbac | None = None  # type: ignore[valid-type]
    logs: Logs | None = None  # type: ignore[valid-type]
    daemons: Daemons | None = None  # type: ignore[valid-type]
    data: Data | None = None  # type: ignore[valid-type]
    dashboard: Dashboard | None = None  # type: ignore[valid-type]
    metrics: Metrics | None = None  # type: ignore[valid-type]
    azure: Azure | None = None  # type: ignore[valid-type]
    oci: Oci | None = None  # type: ignore[valid-type]
    vast: Vast | None = None  # type: ignore[valid-type]
    nebius: Nebius | None = None  # type: ignore[valid-type]
    # skyd's own provider sections
    runpod: _Neo | None = None  # type: ignore[valid-type]
    vultr: _Neo | None = None  # type: ignore[valid-type]
    hotaisle: _Neo | None = None  # type: ignore[valid-type]
    do: _Neo | None = None  # type: ignore[valid-type]
    amddevcloud: _Neo | None = None  # type: ignore[valid-type]
    crusoe: _Neo | None = None  # type: ignore[valid-type]

    @field_validator("allowed_clouds")
    @classmethod
    def _clouds(cls, v: list[str] | None) -> list[str] | None:
        return _check_clouds(v)


#: Keys of skyd's own (not SkyPilot's): allowed in skyd's config.yaml; never reported.
SKYD_ONLY: frozenset[str] = frozenset({
    "aws.placement_group", "gcp.project_id", "gcp.network", "gcp.ssh_user", "gcp.ssh_port",
    "kubernetes.pending_timeout_s", "kubernetes.ports_service_type", "kubernetes.image",
    "kubernetes.image_amd", "kubernetes.image_cpu", "kubernetes.allow_spot", "slurm.clusters",
    "runpod", "vultr", "hotaisle", "do", "amddevcloud", "crusoe",
})  # fmt: skip
