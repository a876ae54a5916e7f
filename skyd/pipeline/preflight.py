"""What a launch refuses before it provisions, asked without launching.

`launch` runs these checks before anything is made (skyd.pipeline.launch and
skyd.pipeline.provision call them); `launch --dryrun` calls the same functions for every row
of its plan table, so the LAUNCH column says "now" only where the launch would really go
ahead (an ``image_id`` on ``local``, a missing local source: refused in both; a git workdir
is cloned at launch, so a dry run plans it without cloning).

Not asked by a dry run: whether the task's buckets exist (that needs the storage provider's
API and credentials; the launch checks it before provisioning too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skyd.errors import SkydError

if TYPE_CHECKING:
    from skyd.models.task import Task
    from skyd.solver.plan import Choice as SolverChoice


def task_refusal(task: Task) -> SkydError | None:
    """Why the launch refuses the task on any infra (workdir, local sources), or None."""
    from skyd.pipeline.launch import check_local_paths

    try:
        check_local_paths(task)
    except SkydError as e:
        return e
    return None


def choice_refusal(task: Task, choice: SolverChoice) -> SkydError | None:
    """Why the launch would skip this plan row (a solver choice) for the task: a feature
    the task uses that its infra cannot serve, or None."""
    from skyd.pipeline import provision
    from skyd.pipeline.placement import placements_of

    placements = placements_of(choice)  # each knows the resources entry it came from
    if not placements:
        return None
    lacks = provision.unsupported_for(task, placements[0])
    if not lacks:
        return None
    return provision.feature_error(task, sorted(lacks)[0], [choice.cloud])


def describe(e: SkydError) -> str:
    field = getattr(e, "field", None)
    hint = getattr(e, "hint", None)
    return e.message + (f" [{field}]" if field else "") + (f"; {hint}" if hint else "")


async def reuse_note(store: Any, name: str | None, tasks: list[Any]) -> tuple[str, SkydError | None] | None:
    """A dry run naming an existing cluster: the launch reuses it (no provisioning) when the
    task fits it, and refuses otherwise (skyd.pipeline.fit.check_fits, as the launch
    does). None when there is no such cluster."""
    if not name or len(tasks) != 1:
        return None
    from skyd.pipeline import clusters_db as cdb
    from skyd.pipeline import fit

    row = await cdb.get_cluster(store, name)
    handle = cdb.handle_of(row) if row else None
    if row is None or handle is None or row.get("status") not in (cdb.UP, cdb.STOPPED):
        return None
    try:
        fit.check_fits(tasks[0], handle)
    except SkydError as e:
        return str(row["status"]), e
    return str(row["status"]), None
