"""FIFO admission against the node's CPU/GPU capacity. Pure; Python 3.8 compatible.

Like SkyPilot's FIFOScheduler (whose drivers all wait on Ray placement groups, so Ray grants
whichever pending job fits first), a pending job that does not fit does NOT block later jobs
that do: jobs are considered in submission order and every one that fits is admitted.
"""

# ruff: noqa: UP031, UP041  (Python 3.8 runtime: keep typing aliases, asyncio.TimeoutError, %-format)

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

EPS = 1e-9


class Capacity:
    def __init__(self, cpus: float, gpu_indices: Sequence[int]) -> None:
        self.cpus = float(cpus)
        self.gpu_indices = list(gpu_indices)

    def fits_ever(self, cpus: float, gpus: int) -> bool:
        return cpus <= self.cpus + EPS and gpus <= len(self.gpu_indices)


def plan_admissions(
    pending: Sequence[dict[str, Any]],
    active: Sequence[dict[str, Any]],
    capacity: Capacity,
) -> list[tuple[int, list[int]]]:
    """Return (job_id, gpu_slots) for each pending job to start now, in FIFO order.

    `pending` and `active` are job rows (cpus, gpus, gpu_slots); active jobs hold their
    resources until they end.
    """
    free_cpus = capacity.cpus - sum(float(j["cpus"]) for j in active)
    used = set()
    for j in active:
        used.update(j["gpu_slots"])
    free_slots = [i for i in capacity.gpu_indices if i not in used]
    out: list[tuple[int, list[int]]] = []
    for job in sorted(pending, key=lambda j: j["job_id"]):
        cpus, gpus = float(job["cpus"]), int(job["gpus"])
        if cpus <= free_cpus + EPS and gpus <= len(free_slots):
            slots, free_slots = free_slots[:gpus], free_slots[gpus:]
            free_cpus -= cpus
            out.append((int(job["job_id"]), slots))
    return out
