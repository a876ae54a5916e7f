"""The agent's job spec, built once from the task and what its placement resolved to.

The typed :class:`skyd.nodeagent.spec.JobSpec` is made here (the task's run/setup, envs and
secrets apart, and the GPUs/CPUs of the resources entry the cluster was planned for: a
:class:`skyd.pipeline.placement.Resolved`); the backend adds the cluster's nodes
(skyd.pipeline.backend.AgentBackend.execute) and the agent client turns it into the wire
message in one place (skyd.nodeagent.spec.spec_to_proto).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from skyd.nodeagent.spec import JobSpec
from skyd.pipeline.backend import WORKDIR

if TYPE_CHECKING:
    from skyd.models.task import Task
    from skyd.pipeline.placement import Resolved

#: SkyPilot's nvidia_gpus.disable_ecc, as far as a running node allows: ECC is switched off
#: with nvidia-smi; the change takes effect at the node's next reboot (skyd stop + start),
#: since rebooting under a running job would kill it.
ECC_OFF = ('if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -q | grep -A2 "ECC Mode" '
           '| grep Current | grep -q Enabled; then sudo -n nvidia-smi -e 0 >/dev/null 2>&1 '
           '&& echo "skyd: nvidia_gpus.disable_ecc: ECC off after the next reboot (skyd stop, start)"; fi\n')


def _ecc_prelude(gpus: int) -> str:
    from skyd import config

    return ECC_OFF if gpus and config.current().get("nvidia_gpus", "disable_ecc") else ""


def build_job_spec(task: Task, resolved: Resolved, *, with_setup: bool, name: str,
                   extra_envs: Mapping[str, str] | None = None) -> JobSpec:
    """The job the agent runs: ``resolved`` is the resources entry the cluster was planned
    for (Placement.resolved, or skyd.pipeline.fit.resolved_on for a reused cluster);
    ``extra_envs``: the caller's own variables (a managed job's ids), over the task's."""
    # Secrets travel apart from envs: the agent keeps them in a 0600 file, not in jobs.db.
    secret_values = {k: str(v) for k, v in (task.secrets or {}).items() if v is not None}
    envs = {k: v for k, v in (task.envs or {}).items() if v is not None and k not in secret_values}
    envs.update(extra_envs or {})
    return JobSpec(
        name=task.name or name,
        setup=_ecc_prelude(resolved.gpus) + (task.setup or "") if with_setup else "",
        run=task.run or "",
        envs=envs,
        secrets=secret_values,
        workdir=WORKDIR,
        gpus=resolved.gpus,
        cpus=resolved.cpus,
        task_id="",  # the agent fills in SkyPilot's sky-<ts>_<cluster>_<id> form
    )
