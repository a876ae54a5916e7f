"""A task on a cluster that already exists (a launch reusing it, `exec`, a managed job's
next task): does it fit what the cluster has (nodes, infra, region, GPUs, container image
and binds), which of its resources entries the job runs under, and the workdir to sync.
Planning a new cluster is skyd.pipeline.planner."""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any

from skyd.clouds.base import ClusterHandle, get_cloud
from skyd.errors import ClusterStateError
from skyd.pipeline.placement import Resolved, resolve_entry
from skyd.solver.request import fmt_count, parse_count

if TYPE_CHECKING:
    from skyd.models.resources import Resources
    from skyd.models.task import Task

__all__ = ["check_fits", "resolved_on", "resources_on", "workdir_path"]


def _mismatch(r: Resources, handle: ClusterHandle) -> str | None:
    """Why the cluster does not serve this resources entry (infra, region, GPUs, container
    image), or None when it does."""
    if r.cloud and r.cloud != handle.cloud:
        return f"infra {r.cloud} != {handle.cloud}"
    if r.region and handle.region and r.region != handle.region:
        return f"region {r.region} != {handle.region}"
    acc = r.accelerator
    if acc:
        have = handle.accelerators.get(acc[0], 0)
        if have < float(acc[1]):
            return f"{acc[0]}:{fmt_count(float(acc[1]))} (cluster has {_fmt_accs(handle)})"
    return _container_mismatch(r, handle)


def _fitting(task: Task, handle: ClusterHandle) -> tuple[Resources | None, list[str]]:
    """The first resources entry of the task that the cluster serves, and why the others
    do not."""
    reasons: list[str] = []
    for r in task.resources:
        why = _mismatch(r, handle)
        if why is None:
            return r, reasons
        reasons.append(why)
    return None, reasons


def check_fits(task: Task, handle: ClusterHandle, *, mounts: bool = True) -> None:
    """A task reusing a cluster must fit what the cluster has (any candidate); with
    ``mounts`` (launch, not exec: exec syncs no file mounts) its file mounts too."""
    if task.num_nodes > handle.num_nodes:
        raise ClusterStateError(
            f"the task needs {task.num_nodes} nodes; cluster {handle.cluster_name!r} has"
            f" {handle.num_nodes}",
            hint="launch on a new cluster (-c NEWNAME) or lower num_nodes",
        )
    if mounts:
        _check_container_binds(task, handle)
    entry, reasons = _fitting(task, handle)
    if entry is None and task.resources:
        raise ClusterStateError(
            f"task does not fit cluster {handle.cluster_name!r}: " + "; ".join(reasons),
            hint="launch on a new cluster (-c NEWNAME), or change the task's resources",
        )


def resources_on(task: Task, handle: ClusterHandle) -> Resources | None:
    """The task's resources entry a job on this cluster runs under (its GPUs, CPUs): the
    first that the cluster serves and has the CPUs and memory for (any_of lists several:
    an entry asking more CPUs than the nodes have is not the one the cluster was planned
    for), else the first it serves."""
    served = [r for r in task.resources if _mismatch(r, handle) is None]
    if not served:
        return task.resources[0] if task.resources else None
    return next((r for r in served if _has_room(r, handle)), served[0])


def _has_room(r: Resources, handle: ClusterHandle) -> bool:
    """The node's CPUs and memory (when the handle knows them) cover what the entry asks."""
    cpus, _ = parse_count(r.cpus)
    mem, _ = parse_count(r.memory)
    return not ((cpus is not None and handle.cpus is not None and cpus > float(handle.cpus))
                or (mem is not None and handle.memory_gib is not None
                    and mem > float(handle.memory_gib)))


def resolved_on(task: Task, handle: ClusterHandle, index: int | None = None) -> Resolved:
    """What a job on an existing cluster runs under: the entry the cluster was made for
    (``index``, recorded when this launch provisioned it), else the one
    :func:`resources_on` finds; resolved as a placement's is (skyd.pipeline.placement)."""
    res = list(task.resources)
    entry = res[index] if index is not None and 0 <= index < len(res) else resources_on(task, handle)
    index = next((i for i, r in enumerate(task.resources) if r is entry), 0)
    return resolve_entry(entry, index, region=handle.region,
                         accelerator=next(iter(handle.accelerators), None))


def _check_container_binds(task: Task, handle: ClusterHandle) -> None:
    """An absolute file-mount destination is bound into a node's container when it is made;
    a later launch cannot add one (it would be synced where the container cannot see it)."""
    spec = (handle.nodes[0].extra.get("container") or {}) if handle.nodes else {}
    if not spec:
        return
    bound = {str(b[1]) for b in spec.get("binds") or []}
    shared = {str(b[1]) for b in spec.get("binds") or [] if b[0] in (spec.get("shared") or [])}
    home = str((spec.get("env") or {}).get("HOME") or "")
    for dst, fm in (getattr(task, "file_mounts", None) or {}).items():
        if str(dst).startswith("/") and str(dst) not in bound:
            raise ClusterStateError(
                f"file_mounts.{dst}: cluster {handle.cluster_name!r} runs its task in a container"
                " made without this destination, so it would not be visible there",
                hint="launch on a new cluster (-c NEWNAME), or mount it under ~ or an existing destination")
        # a bucket MOUNT shows inside only where the container was made with a shared bind
        if fm.kind == "storage" and (fm.mode or "MOUNT") != "COPY":
            d = str(dst)
            at = d if d.startswith("/") else posixpath.normpath(posixpath.join(home, d[2:] if d.startswith("~/") else d))
            if at not in shared:
                raise ClusterStateError(
                    f"file_mounts.{dst}: cluster {handle.cluster_name!r} runs its task in a container"
                    " made without this bucket mount, so the mount would not be visible there",
                    hint="launch on a new cluster (-c NEWNAME), or use mode: COPY")


def _container_mismatch(r: Any, handle: ClusterHandle) -> str | None:
    """A cluster whose nodes run a task container (image_id docker:, docs/containers.md)
    runs that image only: another image, or none, needs another cluster."""
    have = ((handle.nodes[0].extra.get("container") or {}).get("image")) if handle.nodes else None
    want = getattr(r, "docker_image", None)
    if have is None:
        # no task container: a pod infra whose pods are the image, or a VM-image cluster
        return f"image_id docker:{want} (cluster runs no container image)" if (
            want and not get_cloud(handle.cloud).native_containers) else None
    if want and want != have:  # no image_id asked: the task runs in the cluster's container
        return f"image_id docker:{want} (cluster runs docker:{have})"
    return None


def _fmt_accs(handle: ClusterHandle) -> str:
    return ", ".join(f"{k}:{fmt_count(v)}" for k, v in handle.accelerators.items()) or "no GPUs"


def workdir_path(task: Task) -> str:
    """The local directory synced as the workdir; a git workdir ({url, ref}) is cloned on
    this machine first (skyd.pipeline.gitworkdir; blocking the first time: the launch
    calls it from a worker thread before syncing)."""
    wd = task.workdir
    if wd is None or isinstance(wd, str):
        return wd or ""
    from skyd.pipeline import gitworkdir

    return str(gitworkdir.checkout(str(wd.url), wd.ref))
