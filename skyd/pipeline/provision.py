"""OPTIMIZE + PROVISION: the provisioning lifecycle and failover over the ranked plan.

One attempt (docs/providers.md, "Lifecycle"):
1. the request is built from the task's resources (ports, disk, image, labels) and the
   candidate's infra is checked for the features it cannot serve (`Cloud.unsupported`);
2. the partial handle (cloud, region, zone, tag) is written to SQLite, in one transaction,
   before the provider's first create call;
3. `provision` runs under the cloud's deadline (`Cloud.attempt_timeout()`), and then, still
   under it, every node's agent must report the ordered GPUs (`skyd.clouds.gpucheck`: vendor,
   model and count, whatever the provider);
4. a failure is recorded on the request (stage PROVISION failed, with its scope), what the
   attempt made is removed (`Provisioner.forget`), and its scope is blocked: the zone, the
   region, the whole cloud (also for credential errors and hung attempts past the
   deadline on a cloud-wide outage), or "stop", which ends the launch at once.
After each failure the task is planned again with the blocks (SkyPilot's failover: the
next best candidate, which may be another region of the same cloud); the error after the
last plan lists every attempt and why it failed.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from skyd.clouds import gpucheck
from skyd.clouds.base import (
    FEATURE_FIELDS,
    ClusterHandle,
    PartialHandle,
    ProvisionRequest,
    get_cloud,
    registered_clouds,
    requested_features,
)
from skyd.daemon.owners import current_user
from skyd.daemon.store import KV
from skyd.errors import (
    CredentialsError,
    FailoverScope,
    InvalidSpecError,
    ResourcesUnavailableError,
    SkydError,
)
from skyd.pipeline import cloudcheck, planner
from skyd.pipeline import clusters_db as cdb
from skyd.pipeline.backend import AgentBackend
from skyd.pipeline.placement import Placement, gpu_vendor

if TYPE_CHECKING:
    from skyd.models.task import Task
    from skyd.pipeline.launchctx import LaunchContext

RETRY_UNTIL_UP_GAP = 30.0
FORGET_TIMEOUT_S = 120.0  # bound on cleaning one attempt up (a hung API must not stall)


@dataclass(frozen=True)
class Attempt:
    """One failed provisioning attempt, as the final error and the request log show it."""

    target: str
    scope: FailoverScope
    message: str

    def line(self) -> str:
        return f"{self.target}: [{self.scope}] {self.message}"


# -- the request ---------------------------------------------------------------------------


def build_request(task: Task, name: str, tag: str, choice: Placement,
                  token: str | None = None) -> ProvisionRequest:
    """The provider's request, built in this one place from the placement: what its
    resources entry resolves to (skyd.pipeline.placement.Resolved) and its catalog row."""
    r = choice.resolved(task)
    # docker:<img> on an infra that runs containers on its nodes: the node keeps the
    # provider's default VM image, and the task runs in the container (docs/containers.md).
    container = container_request(task, r.image_id, choice, tag or name)
    return ProvisionRequest(
        cluster_name=name,
        num_nodes=task.num_nodes,
        offering=choice.offering,
        use_spot=choice.use_spot,
        disk_size=r.disk_size,
        ports=r.ports,
        image_id=None if container is not None else r.image_id,
        labels=r.labels,
        token=token or secrets.token_urlsafe(24),
        tag=tag,
        container=container,
        user=current_user(),
    )


def container_request(task: Task, image_id: str | None, choice: Placement, tag: str) -> Any:
    """What the nodes' containers need (image_id docker:<img> on an infra that runs the
    task's container on its nodes; docs/containers.md), or None."""
    from skyd.transports.container_runtime import ContainerRequest, RegistryLogin, image_of

    image = image_of(image_id)
    if image is None or getattr(get_cloud(choice.offering.cloud), "native_containers", False):
        return None
    mounts = []
    fuse = []  # bucket MOUNT/MOUNT_CACHED: mounted on the node, shared into the container
    for dst, fm in (getattr(task, "file_mounts", None) or {}).items():
        if getattr(fm, "kind", "local") == "storage" and (fm.mode or "MOUNT") != "COPY":
            fuse.append(str(dst))
        if str(dst).startswith("/"):
            mounts.append(str(dst))
    envs = {**(getattr(task, "envs", None) or {}), **(getattr(task, "secrets", None) or {})}
    opts = ((getattr(task, "config", None) or {}).get("docker") or {}).get("run_options")
    off = choice.offering
    return ContainerRequest(image=image, cluster_tag=tag, mounts=tuple(mounts), fuse_mounts=tuple(fuse),
                            run_options=run_options(opts),
                            gpu_vendor=gpu_vendor(off.accelerator), gpu_count=float(off.accelerator_count or 0),
                            login=RegistryLogin.from_envs(envs, image))


def run_options(opts: Any) -> tuple[str, ...]:
    """``docker.run_options`` (a string or a list of strings, SkyPilot's config key) as argv."""
    import shlex

    if not opts:
        return ()
    items = [opts] if isinstance(opts, str) else list(opts) if isinstance(opts, list) else None
    if items is None or not all(isinstance(o, str) for o in items):
        raise InvalidSpecError("docker.run_options must be a string or a list of strings",
                               field="config.docker.run_options", hint="e.g. ['--shm-size=16g']")
    try:
        return tuple(a for o in items for a in shlex.split(o))
    except ValueError as e:
        raise InvalidSpecError(f"docker.run_options: {e}", field="config.docker.run_options",
                               hint="quote each option as a shell would") from None


def _task_features(task: Task) -> set[str]:
    # COPY-mode bucket mounts go through the daemon (skyd.storage) on every infra; the
    # feature gates only the FUSE modes (MOUNT, MOUNT_CACHED: rclone on the node, where the
    # provider has a node_shell).
    fms = (getattr(task, "file_mounts", None) or {}).values()
    mount = any(getattr(fm, "kind", "local") == "storage" and (fm.mode or "MOUNT") != "COPY"
                for fm in fms)
    return {"bucket_mounts"} if mount else set()


def _unsupported(cloud_name: str, features: set[str]) -> set[str]:
    return set(get_cloud(cloud_name).unsupported) & features


def _supporters(feature: str) -> list[str]:
    out = []
    for name in registered_clouds():
        try:
            if feature not in get_cloud(name).unsupported:
                out.append(name)
        except SkydError:
            continue
    return out


def _feature_error(task: Task, feature: str, clouds: list[str]) -> InvalidSpecError:
    where = ", ".join(repr(c) for c in sorted(set(clouds)))
    others = [c for c in _supporters(feature) if c not in clouds]
    hint = (f"infras that support it: {', '.join(others)}" if others
            else "no infra in this build supports it; remove it from the task")
    if feature == "bucket_mounts":
        dst, src = next(iter(task.bucket_mounts().items()))
        return InvalidSpecError(f"bucket mount {src!r} is not supported on the {where} infra",
                                field=f"file_mounts.{dst}", hint=f"use a local path; {hint}")
    what = ("container images (image_id: docker:<image>) are" if feature == "docker_image"
            else f"{feature} is")
    return InvalidSpecError(f"{what} not supported on the {where} infra",
                            field=FEATURE_FIELDS.get(feature, feature), hint=hint)


def unsupported_for(task: Task, choice: Placement) -> set[str]:
    """The features the task uses that the choice's infra cannot serve (checked before
    provisioning; a dry run's LAUNCH column asks the same: skyd.pipeline.preflight)."""
    used = requested_features(build_request(task, "", "", choice)) | _task_features(task)
    return _unsupported(choice.offering.cloud, used)


def feature_error(task: Task, feature: str, clouds: list[str]) -> InvalidSpecError:
    return _feature_error(task, feature, clouds)


def supported_choices(
    ctx: LaunchContext, task: Task, name: str, choices: list[Placement]
) -> list[Placement]:
    """The choices whose infra serves every feature the task uses; a clear InvalidSpecError
    (the field, and the infras that do support it) when none is left."""
    keep: list[Placement] = []
    missing: dict[str, list[str]] = {}
    for c in choices:
        lacks = unsupported_for(task, c)
        if not lacks:
            keep.append(c)
            continue
        for f in lacks:
            missing.setdefault(f, []).append(c.offering.cloud)
    if not keep:
        feature = sorted(missing)[0]
        raise _feature_error(task, feature, missing[feature])
    for f, clouds in sorted(missing.items()):
        ctx.log(f"Skipping {', '.join(sorted(set(clouds)))}: {f} ({FEATURE_FIELDS.get(f, f)}) is not supported there")
    return keep


# -- one attempt ---------------------------------------------------------------------------


async def forget(store: Any, partial: PartialHandle, log: Any) -> None:
    """Remove what an attempt at `partial` made, then its row; bounded in time. Raises
    (leaving the row, so `down`/the leak pass retry) when the provider cannot clean up."""
    prov = get_cloud(partial.cloud).provisioner()
    with anyio.CancelScope(shield=True):
        with anyio.fail_after(FORGET_TIMEOUT_S):
            await prov.forget(partial)
        await cdb.remove_cluster(store, partial.cluster_name)


def _blocked(choice: Placement, blocked: list[planner.Block]) -> bool:
    o = choice.offering
    for b in blocked:
        if b.cloud != o.cloud:
            continue
        if b.region is None or (b.region == o.region and (b.zone is None or b.zone == o.zone)):
            return True
    return False


async def _attempt(
    ctx: LaunchContext, task: Task, name: str, tag: str, choice: Placement, token: str
) -> ClusterHandle | tuple[Attempt, ResourcesUnavailableError]:
    store = ctx.store
    cloud = get_cloud(choice.offering.cloud)
    req = build_request(task, name, tag, choice, token)

    async def on_status(reason: str) -> None:
        await cdb.set_status(store, name, cdb.INIT, reason)

    req = dataclasses.replace(req, on_status=on_status)
    partial = req.partial()
    await ctx.stage("PROVISION", "start", target=choice.describe())
    # The ports the task opens are the cluster's (`status --endpoints`).
    public = {**choice.public(), **({"ports": list(req.ports)} if req.ports else {})}
    await cdb.insert_init(store, name, request_id=ctx.request_id, resources=public,
                          num_nodes=task.num_nodes, partial=partial)
    backend = AgentBackend(cloud.provisioner())
    timeout = cloud.attempt_timeout()
    err: ResourcesUnavailableError
    handle: ClusterHandle | None = None
    try:
        with anyio.move_on_after(timeout) as deadline:
            made = await backend.provision(req, ctx.log)
            if made is not None and made.accelerators and not made.extra.get(gpucheck.CONFIRMED):
                # every node proves its GPUs before the cluster is UP (all providers)
                await gpucheck.confirm(cloud.provisioner(), made, image=req.image_id,
                                       user_image=bool(req.image_id))
                ctx.log("GPUs confirmed by the node agents: " + ", ".join(
                    f"{a}:{c:g}" for a, c in made.accelerators.items()) + " per node")
            handle = made  # only a handle whose GPUs are confirmed is ever saved UP
        if handle is None or deadline.cancelled_caught:
            err = ResourcesUnavailableError(
                f"provisioning did not finish within {timeout:g}s (the provider's API hung)",
                scope="zone" if choice.offering.zone else "region",
            )
            handle = None
    except ResourcesUnavailableError as e:
        err = e
    except CredentialsError as e:
        err = ResourcesUnavailableError(f"credentials refused: {e}", scope="cloud",
                                        provider_message=e.hint, hint=e.hint)
        await cloudcheck.record_failure(store, choice.offering.cloud, str(e))
    except BaseException:
        # Cancelled, or an infra failure: remove what was half made, then report.
        with anyio.CancelScope(shield=True):
            await forget(store, partial, ctx.log)
            await drop_provision_token(store, ctx.request_id, name)
        raise
    if handle is not None:
        if not handle.tag:
            handle.tag = tag
        await cdb.save_handle(store, handle, cdb.UP)
        await drop_provision_token(store, ctx.request_id, name)
        from skyd.pipeline import sshconfig

        await sshconfig.announce(handle, ctx.log)
        await ctx.stage("PROVISION", "done", infra=choice.describe())
        return handle
    scope: FailoverScope = err.scope or ("zone" if choice.offering.zone else "region")
    detail = err.message + (f" (provider: {err.provider_message})"
                            if err.provider_message and err.provider_message not in err.message else "")
    attempt = Attempt(choice.describe(), scope, detail)
    ctx.log(f"Provisioning failed on {attempt.target} (blocking the {scope}): {detail}")
    await ctx.stage("PROVISION", "failed", target=attempt.target, scope=scope, error=detail)
    try:
        await forget(store, partial, ctx.log)  # nothing half-made is left behind
    except Exception as e:
        raise SkydError(
            f"could not remove what the failed attempt on {attempt.target} made: {e}",
            hint=f"`skyd down {name}` tries again",
        ) from e
    return attempt, err


# -- the loop ------------------------------------------------------------------------------


def exhausted(err: ResourcesUnavailableError, tried: list[Attempt]) -> ResourcesUnavailableError:
    """The error after the last plan: what was tried and why each failed."""
    if not tried:
        return err
    lines = "\n".join(f"  - {a.line()}" for a in tried)
    out = ResourcesUnavailableError(
        f"{err.message}; tried {len(tried)} candidate(s):\n{lines}",
        scope=err.scope, provider_message=err.provider_message, field=err.field,
        hint=err.hint or "relax the resources, or use --retry-until-up",
    )
    return out


async def provision_token(store: Any, request_id: str, name: str) -> str:
    """The cluster token of this provisioning, persisted once before any agent starts.

    A provisioning resumed after a daemon crash may find agents it already started, so it
    must hand them the same token: a fresh one would leave them answering UNAUTHENTICATED.
    Dropped once the handle (which carries it) is saved.
    """
    key = f"provision-token:{request_id}:{name}"
    async with store.tx() as db:
        known = await KV.get(db, key)
        if known is not None:
            return str(known)
        token = secrets.token_urlsafe(24)
        await KV.put(db, key, token)
    return token


async def drop_provision_token(store: Any, request_id: str, name: str) -> None:
    await store.kv_delete(f"provision-token:{request_id}:{name}")


def inside_pin(choices: list[Placement], pin: dict[str, Any] | None) -> list[Placement]:
    """The choices inside a pinned location (a managed job's recovery on the same infra);
    a pin is matched on the offering's own cloud/region/zone, whatever the infra's syntax."""
    if not pin:
        return choices
    keep = [
        c for c in choices
        if all(pin.get(k) in (None, getattr(c.offering, k)) for k in ("cloud", "region", "zone"))
    ]
    if not keep:
        loc = "/".join(str(pin[k]) for k in ("cloud", "region", "zone") if pin.get(k))
        raise ResourcesUnavailableError(f"no launchable resources in {loc}", field="resources")
    return keep


async def _tag_for(store: Any, name: str) -> str:
    row = await cdb.get_cluster(store, name)
    if row and row.get("tag"):
        return str(row["tag"])
    return f"{name}-{secrets.token_hex(3)}"


async def clean_stale_partial(ctx: LaunchContext, name: str) -> None:
    """A previous daemon died mid-provision of this cluster: remove what it left first."""
    row = await cdb.get_cluster(ctx.store, name)
    partial = cdb.partial_of(row) if row else None
    if partial is not None:
        ctx.log(f"Removing what an interrupted provisioning left on {partial.describe()}")
        await forget(ctx.store, partial, ctx.log)


async def provision_cluster(
    ctx: LaunchContext, task: Task, name: str, payload: dict[str, Any]
) -> ClusterHandle:
    """OPTIMIZE + PROVISION with failover over the ranked plan (the caller holds the
    cluster lock)."""
    return (await provision_placed(ctx, task, name, payload))[0]


async def _plan(ctx: LaunchContext, task: Task, payload: dict[str, Any], blocked: list[planner.Block],
                shown: str | None) -> planner.RankedChoices:
    ranked = await planner.plan_task(task, blocked=blocked, minimize=payload.get("minimize", "cost"),
                                     catalog_dir=payload.get("catalog_dir"), store=ctx.store,
                                     shown=shown)
    if ranked.reused:
        ctx.log(f"Launching the plan shown (plan {ranked.plan_id}): not planning again")
    elif ranked.replanned:
        ctx.log(f"Planning again: {ranked.replanned} (plan {shown})")
    return ranked


async def provision_placed(
    ctx: LaunchContext, task: Task, name: str, payload: dict[str, Any]
) -> tuple[ClusterHandle, Placement]:
    """:func:`provision_cluster`, also returning the placement the cluster was made for
    (whose resolved resources the job then runs under). ``payload["plan_id"]``: the plan
    a dry run showed for this launch, run as shown unless it no longer holds."""
    store = ctx.store
    blocked: list[planner.Block] = list(payload.get("blocked") or [])
    tried: list[Attempt] = []
    gap = RETRY_UNTIL_UP_GAP
    shown = payload.get("plan_id") if isinstance(payload.get("plan_id"), str) else None
    await clean_stale_partial(ctx, name)
    tag = await _tag_for(store, name)
    token = await provision_token(store, ctx.request_id, name)
    while True:
        await ctx.stage("OPTIMIZE", "start")
        try:
            ranked = await _plan(ctx, task, payload, blocked, shown)
        except ResourcesUnavailableError as e:
            await ctx.stage("OPTIMIZE", "failed")
            if not payload.get("retry_until_up") or not blocked:
                raise exhausted(e, tried) from None
            ctx.log(f"No launchable resources left; retrying in {gap:.0f}s (--retry-until-up)")
            await anyio.sleep(gap)
            gap = min(gap * 2, 600)
            blocked = list(payload.get("blocked") or [])
            continue
        shown = None  # a plan shown once: any later round plans with what failed blocked
        choices = supported_choices(ctx, task, name, inside_pin(ranked, payload.get("pin")))
        await ctx.stage("OPTIMIZE", "done", choice=choices[0].describe(), plan=ranked.table,
                        plan_id=ranked.plan_id, reused=ranked.reused)
        for choice in choices:
            if _blocked(choice, blocked):
                continue
            out = await _attempt(ctx, task, name, tag, choice, token)
            if isinstance(out, ClusterHandle):
                return out, choice
            attempt, err = out
            tried.append(attempt)
            if attempt.scope == "stop":
                raise exhausted(err, tried) if len(tried) > 1 else err
            blocked.append(planner.block_for(choice, err))
            # Re-plan with the new block: the next best may be another region of this
            # cloud, which the plan's alternatives (one per cloud and type) do not list.
            break
        else:  # the plan offered only blocked candidates: nothing is left to try
            raise exhausted(ResourcesUnavailableError(
                "no launchable resources: every candidate is blocked", field="resources"), tried)
