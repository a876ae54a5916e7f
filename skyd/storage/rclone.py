"""MOUNT and MOUNT_CACHED: the bucket is mounted on every node with ``rclone mount``.

On each node (through the provider's ``node_shell``), before setup:

1. rclone, FUSE and fusermount are checked; a Debian/Ubuntu node where we are root (or
   have passwordless sudo) gets ``apt-get install rclone fuse3`` (said in the launch log),
   any other node missing them is a clear error naming the node and what to install;
2. an rclone config is written to ``<skyd dir>/rclone.conf`` (0600): one remote per store
   (``skyd-s3``: S3 or an S3-compatible endpoint; ``skyd-gcs``: a GCS service-account
   key), with the credentials the daemon's own discovery found and the endpoint where one
   is set -- secrets travel only in that file, never on a command line, a log or SQLite;
3. ``rclone mount REMOTE:bucket/prefix DST --daemon`` (argv, shlex-quoted): MOUNT streams
   (``--vfs-cache-mode off``: a write reaches the bucket when the file is closed),
   MOUNT_CACHED writes through a local cache under the skyd dir and uploads 1 s after the
   file was last used (``--vfs-cache-mode full --vfs-write-back 1s``).

Mounts already in place are left as they are (a relaunch on an UP cluster). ``unmount_under``
removes every FUSE mount below a directory (sandboxes at down/stop, before any tree is
deleted: removing a tree through a live mount would delete the bucket's objects).
"""

from __future__ import annotations

import os
import posixpath
import shlex
from collections.abc import Callable
from typing import Any

import anyio

from skyd.errors import CredentialsError, SkydError
from skyd.transports.fuse import MOUNTS  # the list unmount_node reads

LogFn = Callable[[str], None]
CONF = "rclone.conf"

CHECK = r"""
if ! command -v rclone >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then
    S=""; [ "$(id -u)" = 0 ] || S="sudo -n"
    export DEBIAN_FRONTEND=noninteractive
    $S apt-get install -y -q rclone fuse3 >/dev/null 2>&1 || { $S apt-get update -q >/dev/null 2>&1 \
      && $S apt-get install -y -q rclone fuse3 >/dev/null 2>&1; } || { echo INSTALL_FAILED; exit 0; }
    echo INSTALLED
  else
    echo NO_RCLONE; exit 0
  fi
fi
if ! { [ -r /dev/fuse ] && [ -w /dev/fuse ]; }; then echo NO_FUSE; exit 0; fi
command -v fusermount3 >/dev/null 2>&1 || command -v fusermount >/dev/null 2>&1 || { echo NO_FUSERMOUNT; exit 0; }
echo READY
"""


class MountError(SkydError):
    """A node cannot mount a bucket (no rclone, no FUSE) or the mount failed."""


def remote_name(store: str) -> str:
    return f"skyd-{store.lower()}"


def _ini(name: str, opts: dict[str, str]) -> str:
    lines = [f"[{name}]"]
    for k, v in opts.items():
        if "\n" in v or "\r" in v:
            raise CredentialsError(f"credential field {k} holds a line break")
        lines.append(f"{k} = {v}")
    return "\n".join(lines) + "\n"


async def s3_remote() -> dict[str, str]:
    """The S3 remote's options from the daemon's credential discovery (botocore's chain)."""
    from skyd.clouds.aws.session import Clients, endpoint_for, guard_endpoint

    guard_endpoint("s3")
    c = Clients()
    try:
        creds = await c.credentials()
        if creds is None:
            raise CredentialsError("no AWS credentials found for the S3 mount",
                                   hint="set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or"
                                        " configure ~/.aws/credentials")
        frozen = await creds.get_frozen_credentials()
    finally:
        await c.close()
    endpoint = endpoint_for("s3")
    opts = {"type": "s3", "provider": "Other" if endpoint else "AWS", "env_auth": "false",
            "access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
            "region": os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"}
    if frozen.token:
        opts["session_token"] = frozen.token
    if endpoint:
        opts["endpoint"] = endpoint
        opts["force_path_style"] = "true"
    return opts


async def config_text(stores: set[str]) -> str:
    out = []
    for st in sorted(stores):
        if st in ("S3", "R2"):
            out.append(_ini(remote_name(st), await s3_remote()))
        elif st == "GCS":
            from skyd.storage.gcs import rclone_remote

            out.append(_ini(remote_name(st), await rclone_remote()))
        else:
            raise MountError(f"store {st} cannot be mounted")
    return "\n".join(out)


def mount_argv(m: Any, dst: str, conf: str, skyd_dir: str, index: int) -> list[str]:
    src = f"{remote_name(m.store)}:{m.bucket}"
    if m.prefix:
        src += "/" + m.prefix.rstrip("/")
    # AWS_CA_BUNDLE (a path on the daemon's machine) makes rclone <= 1.60 refuse its own
    # HTTP transport; TLS uses the node's system roots.
    argv = ["env", "-u", "AWS_CA_BUNDLE", "rclone", "mount", src, dst, "--config", conf, "--daemon", "--daemon-wait", "30s",
            "--log-file", posixpath.join(skyd_dir, f"rclone-{index}.log"), "--log-level", "NOTICE",
            "--dir-cache-time", "5s", "--umask", "022"]
    if m.mode == "MOUNT_CACHED":
        argv += ["--vfs-cache-mode", "full", "--vfs-write-back", "1s",
                 "--cache-dir", posixpath.join(skyd_dir, "rclone-cache")]
    else:
        argv += ["--vfs-cache-mode", "off"]
    return argv


def _mount_script(argv: list[str], dst: str, out: str) -> str:
    """The daemonized rclone must not hold the command's stdout/stderr open (the run would
    wait for it): its own output goes to ``out``."""
    q = shlex.quote(dst)
    # a mount left dead by a killed rclone (a preempted node) is cleared first. Only a live
    # FUSE mount counts as "already": the destination may be a mount point of another kind
    # (the shared bind that carries it into a task's container, docs/containers.md).
    # (root's fusermount would unmount that bind too: it is cleared only when FUSE is there)
    fuse_listed = f"awk -v p={q} '$2 == p && $3 ~ /^fuse/ {{f=1}} END {{exit !f}}' /proc/self/mounts"
    return (f"if {fuse_listed} && stat -c %i {q} >/dev/null 2>&1; then echo ALREADY; else"
            f" if {fuse_listed}; then {{ fusermount3 -uz {q} || fusermount -uz {q}; }} >/dev/null 2>&1; fi;"
            # rclone refuses a destination that is a mount point (the shared bind): allowed there
            f" x=''; if awk -v p={q} '$5 == p {{f=1}} END {{exit !f}}' /proc/self/mountinfo; then"
            f" x=--allow-non-empty; fi;"
            f" mkdir -p {q} && {shlex.join(argv)} $x </dev/null >{shlex.quote(out)} 2>&1"
            f" && echo MOUNTED; fi")


async def prepare_node(sh: Any, log: LogFn) -> None:
    """rclone and FUSE usable on the node (installed where we may); MountError otherwise."""
    r = await sh.transport.run(CHECK, timeout=600)
    word = (r.stdout.strip().splitlines() or ["?"])[-1]
    if word == "READY":
        return
    if word == "INSTALLED":
        log(f"Installed rclone and fuse3 on {sh.label} (apt-get)")
        return
    fixes = {
        "NO_RCLONE": ("rclone is not installed and cannot be installed here (no apt-get, or"
                      " neither root nor passwordless sudo)",
                      "install the rclone and fuse3 packages on the node, or use mode: COPY"),
        "INSTALL_FAILED": ("apt-get install rclone fuse3 failed",
                           "install the rclone and fuse3 packages on the node, or use mode: COPY"),
        "NO_FUSE": ("/dev/fuse is not usable (missing, or not readable and writable)",
                    "give the node FUSE (/dev/fuse; a privileged container), or use mode: COPY"),
        "NO_FUSERMOUNT": ("fusermount3/fusermount is missing",
                          "install the fuse3 package on the node, or use mode: COPY"),
    }
    msg, hint = fixes.get(word, (f"the FUSE check failed: {(r.stderr or r.stdout).strip()[-200:]}",
                                 "use mode: COPY"))
    raise MountError(f"cannot mount buckets on {sh.label}: {msg}", hint=hint)


async def mount_on_node(sh: Any, mounts: list[Any], conf_text: str, log: LogFn) -> None:
    await prepare_node(sh, log)
    conf = posixpath.join(sh.skyd_dir, CONF)
    await sh.transport.run(["mkdir", "-p", "-m", "700", sh.skyd_dir], check=True)
    await sh.transport.write_file(conf, conf_text.encode(), mode=0o600)
    for i, m in enumerate(mounts):
        dst = sh.path(m.dst)
        argv = mount_argv(m, dst, conf, sh.skyd_dir, i)
        out = posixpath.join(sh.skyd_dir, f"rclone-{i}.out")
        r = await sh.transport.run(_mount_script(argv, dst, out), timeout=90)
        if not r.ok:
            tail = await sh.transport.run(["tail", "-q", "-n", "5", out,
                                           posixpath.join(sh.skyd_dir, f"rclone-{i}.log")])
            raise MountError(f"rclone mount of {m.uri} at {m.dst} on {sh.label} failed:"
                             f" {(tail.stdout or r.stderr).strip()[-300:]}",
                             hint=f"check {m.field}; or use mode: COPY")
        listed = posixpath.join(sh.skyd_dir, MOUNTS)
        await sh.transport.run(f"grep -qxF -- {shlex.quote(dst)} {shlex.quote(listed)} 2>/dev/null"
                               f" || printf '%s\\n' {shlex.quote(dst)} >> {shlex.quote(listed)}")
        how = "already mounted" if "ALREADY" in r.stdout else "mounted"
        log(f"{m.uri} {how} at {m.dst} on {sh.label} ({m.mode}, rclone)")


async def mount_all(prov: Any, handle: Any, mounts: list[Any], log: LogFn) -> None:
    """Mount every MOUNT/MOUNT_CACHED entry on every node."""
    shells = [prov.node_shell(handle, r) for r in range(len(handle.nodes))]
    if any(s is None for s in shells):
        raise MountError(f"the {handle.cloud!r} infra cannot mount buckets on its nodes",
                         hint="use mode: COPY")
    conf_text = await config_text({m.store for m in mounts})
    async with anyio.create_task_group() as tg:
        for sh in shells:
            tg.start_soon(mount_on_node, sh, mounts, conf_text, log)

