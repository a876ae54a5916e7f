"""Bucket MOUNT / MOUNT_CACHED inside a node's container (docs/containers.md "Bucket MOUNT
inside the container"): the destinations' node paths are made shared mount points before
the container starts, and undone after it is gone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyd.transports.base import Transport
from skyd.transports.container_images import image_error

if TYPE_CHECKING:
    from skyd.transports.container_runtime import ContainerSpec


# Bucket MOUNT inside a container: each destination's node path becomes a mount point of
# its own (a bind onto itself) in a shared peer group, bound into the container with rslave
# propagation: rclone's FUSE mount made there afterwards (skyd.storage.rclone, on the node)
# shows inside, and its unmount too. The node's own mounts stay private (only these paths
# change). A rootful runtime is needed: rootless podman's mount namespace is a slave of
# nothing the node can share into. args: the node paths; env KIND (docker|podman).
_SHARE = r"""
if [ "$(id -u)" = 0 ]; then S=""; elif [ "$KIND" = docker ] && sudo -n true 2>/dev/null; then S="sudo -n"
else echo NOROOT; exit 0; fi
for p in "$@"; do
  mkdir -p "$p" 2>/dev/null || $S mkdir -p "$p" || { echo "FAILED mkdir $p"; exit 0; }
  if ! awk -v p="$p" '$5 == p {f=1} END {exit !f}' /proc/self/mountinfo; then
    $S mount --bind "$p" "$p" 2>&1 || { echo "FAILED mount --bind $p"; exit 0; }
  fi
  $S mount --make-shared "$p" 2>&1 || { echo "FAILED mount --make-shared $p"; exit 0; }
done
echo OK
"""

# the undo, after the container is gone (a FUSE mount still there goes too: lazily). Only
# what skyd made goes: a FUSE mount, or a bind (its root in its file system is not "/");
# a file system the node had mounted at that path itself stays.
_UNSHARE = r"""
if [ "$(id -u)" = 0 ]; then S=""; elif sudo -n true 2>/dev/null; then S="sudo -n"; else exit 0; fi
for p in "$@"; do
  i=0
  while [ $i -lt 4 ]; do
    top=$(awk -v p="$p" '$5 == p {r=$4; for (k = 6; k <= NF; k++) if ($k == "-") {t=$(k+1); break}}
                         END {if (r != "") print r, t}' /proc/self/mountinfo)
    [ -n "$top" ] || break
    root=${top%% *}; fstype=${top#* }
    case "$fstype" in fuse*) ;; *) [ "$root" != / ] || break ;; esac
    $S umount -l "$p" 2>/dev/null || break; i=$((i+1))
  done
done
true
"""


async def share_binds(t: Transport, spec: ContainerSpec) -> None:
    res = await t.run(["sh", "-c", _SHARE, "sh", *spec.shared], env={"KIND": spec.kind}, timeout=60)
    word = (res.stdout.strip().splitlines() or ["?"])[-1]
    if word == "OK":
        return
    if word == "NOROOT":
        where = ", ".join(dst for src, dst in spec.binds if src in spec.shared) or ", ".join(spec.shared)
        raise image_error(f"file_mounts {where}: a bucket mounted with mode MOUNT/MOUNT_CACHED inside a"
                   f" container image needs a rootful {spec.kind or 'runtime'} on the node (root, or"
                   " docker with passwordless sudo): the mount is made on the node and shared into"
                   " the container, and a rootless runtime receives nothing from the node",
                   "use mode: COPY for that file mount, or give the node docker (with passwordless"
                   " sudo) or a root login")
    raise image_error(f"could not share the bucket mount points into the container: {word} "
               f"{res.stderr.strip()[-200:]}".strip(), "use mode: COPY for that file mount")


async def unshare_binds(t: Transport, spec: ContainerSpec) -> None:
    if spec.shared:
        await t.run(["sh", "-c", _UNSHARE, "sh", *spec.shared], timeout=120)
