"""GPU flags for a node's container, per vendor (docs/containers.md "GPUs per vendor"):
NVIDIA through the container toolkit (``--gpus all`` on docker, the CDI device
``nvidia.com/gpu=all`` on podman, whose spec is generated when the toolkit is there), AMD
with ``/dev/kfd``, ``/dev/dri``, the device files' groups, host IPC and no seccomp filter.
The check that the container sees the GPUs ordered is ``container_runtime.check_gpus``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from skyd.transports.base import Transport

LogFn = Callable[[str], None]


def gpu_flags(kind: str, vendor: str | None, gids: Sequence[str] = ()) -> list[str]:
    """``run`` flags that give the container the node's GPUs. ``gids``: the numeric groups
    owning the node's AMD device files (``/dev/kfd``, ``/dev/dri/renderD*``); the runtime
    resolves group NAMES in the image's /etc/group, where ``render`` is often missing (the
    run would fail: "unable to find group render"), so the node's numbers are used when known."""
    if vendor == "nvidia":
        # docker: the NVIDIA container toolkit's hook; podman: its CDI spec (nvidia-ctk cdi generate).
        return ["--gpus", "all"] if kind == "docker" else ["--device", "nvidia.com/gpu=all"]
    if vendor == "amd":
        # https://rocm.docs.amd.com/projects/install-on-linux/en/latest/how-to/docker.html
        groups = [g for g in dict.fromkeys(gids) if g.isdigit() and g != "0"] or ["video", "render"]
        return ["--device", "/dev/kfd", "--device", "/dev/dri",
                *[a for g in groups for a in ("--group-add", g)],
                "--ipc", "host", "--security-opt", "seccomp=unconfined"]
    return []


async def amd_device_gids(t: Transport) -> list[str]:
    """The groups that own the node's /dev/kfd and render nodes (video/render there)."""
    res = await t.run(["sh", "-c", "stat -c %g /dev/kfd /dev/dri/renderD* 2>/dev/null; true"],
                      timeout=30, idempotent=True)
    return [w for w in res.stdout.split() if w.isdigit()]


_CDI = r"""
ls /etc/cdi/nvidia.yaml /var/run/cdi/nvidia*.yaml >/dev/null 2>&1 && { echo have; exit 0; }
command -v nvidia-ctk >/dev/null 2>&1 || { echo notoolkit; exit 0; }
if [ "$(id -u)" = 0 ]; then S=""; elif sudo -n true 2>/dev/null; then S="sudo -n"; else echo noroot; exit 0; fi
$S mkdir -p /etc/cdi && $S nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml >/dev/null 2>&1 && echo made || echo failed
"""


async def nvidia_cdi(t: Transport, log: LogFn, label: str) -> None:
    """podman reaches NVIDIA GPUs through the toolkit's CDI spec: generate it when the
    toolkit is there and the spec is not (best effort; `run` says what is missing)."""
    res = await t.run(_CDI, timeout=120)
    word = res.stdout.strip()
    if word == "made":
        log(f"{label}: generated the NVIDIA CDI spec for podman (nvidia-ctk cdi generate)")
    elif word == "notoolkit":
        log(f"{label}: warning: no NVIDIA container toolkit (nvidia-ctk) on the node: podman cannot"
            " give the container its GPUs")
