"""``image_id: docker:<image>`` on Slurm: the allocation's agents run inside the image, through
the container runtime the cluster offers (docs/slurm.md "Container images"):

- pyxis + enroot (NVIDIA's SPANK plugin): the job's ``srun`` step gets
  ``--container-image`` (enroot's ``registry#repo:tag`` form), ``--container-mounts`` for
  skyd's directory and the file-mount destinations, the user's home and no entrypoint, so
  ``node.sh`` and the agent it ``exec``s run in the container on every node;
- apptainer or singularity: ``node.sh`` ``exec``s the agent as ``apptainer exec --bind ...
  [--nv|--rocm] docker://<image> python3 agent.pyz ...``.

Either way the container shares the node's network and PIDs (Slurm's process tracking and the
agent's port work as without it), the home (skyd's files, ``~/x`` mounts) is at its path, and
Slurm's GPU binding applies (pyxis passes the allocated devices; apptainer ``--nv``/``--rocm``
with ``CUDA_VISIBLE_DEVICES``/``ROCR_VISIBLE_DEVICES`` from Slurm). Which one: pyxis when the
login host's ``srun --help`` lists ``--container-image``, else apptainer, else singularity; none
is one message naming the cluster before anything is submitted.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from skyd.transports.container_images import registry_of

#: what the login host offers, one word a line (pyxis / apptainer / singularity)
PROBE = r"""
srun --help 2>&1 | grep -q -- '--container-image' && echo pyxis
for c in apptainer singularity; do command -v "$c" >/dev/null 2>&1 && echo "$c"; done
true
"""

ORDER = ("pyxis", "apptainer", "singularity")


def choose(probe_out: str) -> str | None:
    """The runtime to use from PROBE's answer (pyxis first), or None."""
    have = set(probe_out.split())
    return next((k for k in ORDER if k in have), None)


def enroot_image(image: str) -> str:
    """A docker reference in the form pyxis/enroot pull: ``registry#repo:tag`` when the
    reference names a registry (``nvcr.io/nvidia/pytorch:24.01`` ->
    ``nvcr.io#nvidia/pytorch:24.01``), Docker Hub's references as they are."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


def pyxis_flags(image: str, binds: Sequence[str]) -> list[str]:
    """``srun`` options that run the step in the image (pyxis): the binds at their own paths,
    the user's home mounted, the image's entrypoint skipped."""
    flags = [f"--container-image={enroot_image(image)}", "--container-mount-home", "--container-writable",
             "--no-container-entrypoint"]
    if binds:
        flags.append("--container-mounts=" + ",".join(f"{b}:{b}" for b in dict.fromkeys(binds)))
    return flags


def apptainer_prefix(kind: str, image: str, binds: Sequence[str], gpu_vendor: str | None) -> list[str]:
    """The argv prefix that runs a command in the image with apptainer/singularity (the host's
    network and PIDs are apptainer's defaults; $HOME is bound by default)."""
    # the node's environment passes through (Slurm's SLURM_*/GPU variables); the image's
    # own files are writable in a tmpfs (setup may install into it), the home is the host's
    argv = [kind, "exec", "--writable-tmpfs"]
    for b in dict.fromkeys(binds):
        argv += ["--bind", f"{b}:{b}"]
    if gpu_vendor == "nvidia":
        argv.append("--nv")
    elif gpu_vendor == "amd":
        argv.append("--rocm")
    return [*argv, f"docker://{image}"]


def none_message(cluster: str, image: str) -> tuple[str, str]:
    # the fix is in the message too: failover lists each attempt's message, not its hint
    fix = ("ask the cluster's admins for pyxis+enroot or apptainer, drop image_id (run on the"
           " nodes' own software), or launch on another infra")
    return (f"slurm/{cluster} offers no container runtime for image_id docker:{image}: neither"
            " pyxis/enroot (`srun --container-image`) nor apptainer/singularity is installed on its"
            f" login host ({fix})", fix)


def registry_note(image: str) -> str:
    return (f"note: private registry credentials are not passed to Slurm's container runtime;"
            f" log in on the cluster once (enroot: ~/.config/enroot/.credentials; apptainer:"
            f" `apptainer remote login docker://{registry_of(image)}`)")


def quote_all(argv: Sequence[str]) -> str:
    return shlex.join(argv)
