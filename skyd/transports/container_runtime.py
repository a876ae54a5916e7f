"""Container runtimes on a node: the one module that knows docker and podman.

It owns, for ``image_id: docker:<image>`` (docs/containers.md):

- the runtime choice on the node: a working ``docker`` (its daemon answers), else ``podman``,
  else one is installed (apt/dnf/yum, as root or with passwordless sudo) and the launch log
  says so; podman runs with ``runc`` where it is installed (``crun`` refuses hosts with
  hybrid cgroups);
- GPU flags per vendor (NVIDIA: ``--gpus all`` on docker, the CDI device
  ``nvidia.com/gpu=all`` on podman; AMD: ``/dev/kfd``, ``/dev/dri``, the ``video`` and
  ``render`` groups, ``--ipc host`` and ``seccomp=unconfined``, as ROCm's docs say);
- registry login (``SKYPILOT_DOCKER_USERNAME/PASSWORD/SERVER``): the password goes on the
  runtime's stdin (``--password-stdin``), never on a command line nor into the container's
  configuration; the credentials land in an auth file of the cluster's own (0700 dir on the
  node), removed with the cluster;
- pulls with progress (the pull runs detached on the node, its output is relayed line by
  line into the launch log), skipped when the image is already there;
- the checks before anything runs: unknown image, refused credentials, unreachable registry,
  an image built for another architecture, an image without python3/bash: one message naming
  the image and the fix, and no container left behind;
- the container's life: created once per node (``skyd-<cluster tag>-<rank>``, labelled with
  the cluster tag and rank), started again after a stop or reboot, removed with the cluster.

Everything runs through the node's own ``Transport`` (local, ssh, relay), as argv lists.
Image references, credentials and the meaning of a registry's errors are in
``container_images``; the transport that runs the agent inside is ``container``.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio

from skyd.transports.base import RunResult, Transport
from skyd.transports.container_gpus import amd_device_gids, gpu_flags, nvidia_cdi
from skyd.transports.container_images import (
    DOCKER_ENVS,
    RegistryLogin,
    check_image,
    classify_pull,
    image_error,
    image_of,
    loopback_host,
    registry_of,
)
from skyd.transports.container_mounts import share_binds, unshare_binds

LogFn = Callable[[str], None]

LABEL_CLUSTER = "skyd-cluster"
LABEL_RANK = "skyd-rank"
LABEL_SHARED = "skyd-shared"  # the node paths shared into the container (bucket MOUNTs)
PULL_TIMEOUT_S = 3600.0
# What keeps the container alive: PID 1 of the container, ended by `stop` (TERM).
_KEEPALIVE = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
         "ppc64le": "ppc64le", "s390x": "s390x", "armv7l": "arm"}  # fmt: skip


@dataclass
class ContainerSpec:
    """One node's container, as stored in the node handle (``extra['container']``).
    Holds no secret."""

    image: str
    name: str
    binds: list[tuple[str, str]] = field(default_factory=list)  # (node path, container path)
    env: dict[str, str] = field(default_factory=dict)  # non-secret (HOME)
    gpu_vendor: str | None = None  # nvidia | amd | None
    gpu_count: float = 0
    run_options: list[str] = field(default_factory=list)  # docker.run_options
    auth_dir: str = ""  # the cluster's registry credentials on the node (0700)
    cluster_tag: str = ""
    rank: int = 0
    runtime: list[str] = field(default_factory=list)  # argv prefix found on the node
    stage_dir: str = ""  # a bound dir (the node dir) where files for unbound paths wait
    # node paths where bucket MOUNTs land after the container started: each is made a shared
    # mount on the node (a bind onto itself) and bound with rslave propagation, so the FUSE
    # mount made there later shows inside the container
    shared: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["binds"] = [list(b) for b in self.binds]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ContainerSpec:
        d = dict(d)
        d["binds"] = [tuple(b) for b in d.get("binds") or []]
        return cls(**d)

    @property
    def kind(self) -> str:
        return posixpath.basename(self.runtime[0]) if self.runtime else ""


@dataclass(frozen=True)
class ContainerRequest:
    """What a launch asks of every node's container (built by the pipeline from the task;
    providers turn it into one ``ContainerSpec`` per node). ``login`` is never stored."""

    image: str
    cluster_tag: str = ""  # names the containers (skyd-<tag>-<rank>) and labels them
    mounts: tuple[str, ...] = ()  # absolute file-mount destinations (bound at their paths)
    run_options: tuple[str, ...] = ()  # docker.run_options
    gpu_vendor: str | None = None
    gpu_count: float = 0
    login: RegistryLogin | None = field(default=None, repr=False, compare=False)
    fuse_mounts: tuple[str, ...] = ()  # bucket MOUNT/MOUNT_CACHED destinations (any form)

    def spec(self, *, rank: int, cluster_tag: str = "", node_dir: str, home: str,
             resolve: Callable[[str], str] | None = None, extra_binds: Sequence[str] = ()) -> ContainerSpec:
        """The node's container: the node dir, the jobs' HOME (and ``extra_binds``) at their
        own paths, each absolute file-mount destination from where the node keeps it."""
        cluster_tag = cluster_tag or self.cluster_tag or "cluster"
        binds: list[tuple[str, str]] = []
        for p in (home, node_dir, *extra_binds):
            if p and not any(p == b[1] or p.startswith(b[1].rstrip("/") + "/") for b in binds):
                binds.append((p, p))
        shared: list[str] = []
        for dst in self.mounts:
            src = str(resolve(dst)) if resolve else dst
            binds.append((src, dst))
            if dst in self.fuse_mounts:
                shared.append(src)
        for dst in self.fuse_mounts:
            if dst.startswith("/"):
                continue
            # ~/x or x: under the bound HOME, which the container sees at the same path
            rel = dst[2:] if dst.startswith("~/") else "" if dst == "~" else dst
            src = str(resolve(dst)) if resolve else posixpath.normpath(posixpath.join(home, rel))
            binds.append((src, src))
            shared.append(src)
        return ContainerSpec(image=self.image, name=container_name(cluster_tag, rank), binds=binds,
                             env={"HOME": home} if home else {}, gpu_vendor=self.gpu_vendor,
                             gpu_count=self.gpu_count, run_options=list(self.run_options),
                             auth_dir=posixpath.join(node_dir, ".registry"), cluster_tag=cluster_tag,
                             rank=rank, stage_dir=node_dir, shared=shared)


def container_name(cluster_tag: str, rank: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", cluster_tag).strip("-.") or "cluster"
    return f"skyd-{safe}-{rank}"


# -- the node's runtime --------------------------------------------------------------------

_FIND = r"""
if [ -n "$SKYD_WANT" ]; then want="$SKYD_WANT"; else want="docker podman"; fi
for r in $want; do
  case "$r" in
    docker) if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then echo "docker $(command -v docker)"; exit 0; fi ;;
    podman) if command -v podman >/dev/null 2>&1; then
              rt=""; for c in /usr/sbin/runc /usr/bin/runc /usr/local/sbin/runc /usr/local/bin/runc; do [ -x "$c" ] && { rt="$c"; break; }; done
              echo "podman $(command -v podman) $rt"; exit 0; fi ;;
  esac
done
echo none
"""

_INSTALL = r"""
set -e
if [ "$(id -u)" = 0 ]; then S=""; elif sudo -n true 2>/dev/null; then S="sudo -n"; else echo "no root and no passwordless sudo" >&2; exit 3; fi
if command -v apt-get >/dev/null 2>&1; then $S env DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc
elif command -v dnf >/dev/null 2>&1; then $S dnf install -y -q podman runc
elif command -v yum >/dev/null 2>&1; then $S yum install -y -q podman runc
else echo "no apt-get, dnf or yum" >&2; exit 3; fi
"""


# One round trip for what `ensure` needs to know first: the runtime (unless known), the
# container's state, whether the image is there (and its architecture), the node's
# architecture and hard limits. env: SKYD_RT (known runtime argv), SKYD_WANT, NAME, IMAGE.
_PROBE = "find_rt() {\n" + _FIND.replace("exit 0", "return 0") + "}\n" + r"""
if [ -n "$SKYD_RT" ]; then line="known $SKYD_RT"; else line=$(find_rt); fi
echo "runtime $line"
set -- $line
case "$1" in
  known) shift; R="$*" ;;
  docker) R="$2" ;;
  podman) R="$2${3:+ --runtime $3}" ;;
  *) exit 0 ;;
esac
st=$($R inspect --format '{{.State.Status}}' "$NAME" 2>/dev/null) || st="-"
echo "state ${st:--}"
if a=$($R image inspect --format '{{.Architecture}}' "$IMAGE" 2>/dev/null); then echo "image present $a"; else echo "image absent"; fi
echo "arch $(uname -m)"
echo "limits $(ulimit -Hn) $(ulimit -Hu)"
"""


async def probe(t: Transport, spec: ContainerSpec, want: str = "") -> dict[str, list[str]]:
    """_PROBE's answers by their first word."""
    env = {"NAME": spec.name, "IMAGE": spec.image, "SKYD_WANT": want, "SKYD_RT": shlex.join(spec.runtime)}
    res = await t.run(_PROBE, env=env, timeout=90, idempotent=True)
    if "system migrate" in res.stderr and spec.runtime and await _heal(t, spec, res.stderr):
        res = await t.run(_PROBE, env=env, timeout=90, idempotent=True)
    out: dict[str, list[str]] = {}
    for line in res.stdout.splitlines():
        w = line.split()
        if w:
            out[w[0]] = w[1:]
    return out


def _limits(words: list[str]) -> list[tuple[int, int]]:
    vals = [int(v) if v.isdigit() else 1 << 20 for v in words[:2]] + [1 << 20, 1 << 20]
    nofile, nproc = vals[0], vals[1]
    # conmon caps its own nproc at 32768, and the container cannot exceed it: start there
    tries = [(nofile, min(nproc, 32768)), (nofile, nproc), (min(nofile, 4096), min(nproc, 4096)),
             (min(nofile, 1024), min(nproc, 1024))]
    return list(dict.fromkeys(tries))


# every runtime on the node (no install): for leak cleanup by label
FIND_RUNTIME = r"""
command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 && echo "docker $(command -v docker)"
if command -v podman >/dev/null 2>&1; then
  rt=""; for c in /usr/sbin/runc /usr/bin/runc /usr/local/sbin/runc /usr/local/bin/runc; do [ -x "$c" ] && { rt="$c"; break; }; done
  echo "podman $(command -v podman) $rt"
fi
true
"""


def parse_runtimes(out: str) -> list[list[str]]:
    """FIND_RUNTIME's lines -> runtime argv prefixes."""
    found = []
    for line in out.splitlines():
        w = line.split()
        if len(w) >= 2 and w[0] in ("docker", "podman"):
            found.append([w[1], "--runtime", w[2]] if len(w) > 2 else [w[1]])
    return found


async def find_runtime(t: Transport, log: LogFn, *, want: str = "", label: str = "") -> list[str]:
    """The runtime's argv prefix on the node; installs podman when none is there."""
    env = {"SKYD_WANT": want} if want else None
    res = await t.run(_FIND, env=env, timeout=60, idempotent=True)
    words = res.stdout.strip().split()
    if not words or words[0] == "none":
        if want:
            raise image_error(f"{label}: the container runtime {want!r} is not on the node",
                       f"install {want} there, or unset SKYD_CONTAINER_RUNTIME")
        log(f"{label}: no docker or podman found: installing podman (for image_id: docker:...)")
        inst = await t.run(_INSTALL, timeout=900)
        if not inst.ok:
            raise image_error(f"{label}: no container runtime on the node, and installing podman failed",
                       "install docker or podman on the node", inst.stderr.strip() or inst.stdout.strip())
        log(f"{label}: podman installed")
        res = await t.run(_FIND, timeout=60, idempotent=True)
        words = res.stdout.strip().split()
        if not words or words[0] == "none":
            raise image_error(f"{label}: podman is still not found after installing it", "install docker or podman")
    if words[0] == "docker":
        return [words[1]]
    return [words[1], "--runtime", words[2]] if len(words) > 2 else [words[1]]


async def _rt(t: Transport, spec: ContainerSpec, args: Sequence[str], *, input: str | None = None,
              timeout: float | None = 120, auth: bool = False) -> RunResult:
    argv = list(spec.runtime)
    if auth and spec.auth_dir and spec.kind == "docker":
        argv += ["--config", spec.auth_dir]
    argv += list(args)
    if auth and spec.auth_dir and spec.kind == "podman":
        argv[len(spec.runtime) + 1:len(spec.runtime) + 1] = ["--authfile", posixpath.join(spec.auth_dir, "auth.json")]
    if auth and spec.auth_dir:
        # podman/docker read the file only when it exists: an empty login state is fine
        argv = ["sh", "-c", f'mkdir -p {shlex.quote(spec.auth_dir)} && chmod 700 {shlex.quote(spec.auth_dir)}'
                f' && {{ [ -f {shlex.quote(posixpath.join(spec.auth_dir, "auth.json"))} ] || '
                f'echo "{{}}" > {shlex.quote(posixpath.join(spec.auth_dir, "auth.json"))}; }} && exec "$@"', "sh", *argv]
    res = await t.run(argv, input=input, timeout=timeout)
    if not res.ok and await _heal(t, spec, res.stderr):
        res = await t.run(argv, input=input, timeout=timeout)
    return res


async def _heal(t: Transport, spec: ContainerSpec, err: str) -> bool:
    """Rootless podman whose pause process was killed (a `kill -9` of the user's processes)
    refuses every command until `podman system migrate`: do that once, say whether to retry."""
    if spec.kind != "podman" or "system migrate" not in err:
        return False
    return (await t.run([*spec.runtime, "system", "migrate"], timeout=120)).ok


def _tls_flags(spec: ContainerSpec, server: str) -> list[str]:
    # docker treats 127.0.0.0/8 registries as insecure by default; podman needs to be told.
    return ["--tls-verify=false"] if spec.kind == "podman" and loopback_host(server) else []


async def state(t: Transport, spec: ContainerSpec) -> str:
    """The container's state (running, exited, created, ...), or "" when there is none."""
    res = await _rt(t, spec, ["inspect", "--format", "{{.State.Status}}", spec.name], timeout=60)
    return res.stdout.strip().lower() if res.ok else ""


async def login(t: Transport, spec: ContainerSpec, creds: RegistryLogin, log: LogFn) -> None:
    res = await _rt(t, spec, ["login", *_tls_flags(spec, creds.server), "--username", creds.username,
                              "--password-stdin", creds.server],
                    input=creds.password + "\n", timeout=120, auth=True)
    if not res.ok:
        raise classify_pull(spec.image, res.stderr + res.stdout, creds.server)
    log(f"Logged in to {creds.server} as {creds.username}")


async def image_present(t: Transport, spec: ContainerSpec) -> bool:
    res = await _rt(t, spec, ["image", "inspect", "--format", "{{.Id}}", spec.image], timeout=60)
    return res.ok


async def pull(t: Transport, spec: ContainerSpec, log: LogFn, label: str, _healed: bool = False) -> None:
    """Pull the image; its progress lines go to the launch log as they come."""
    d = posixpath.join(spec.auth_dir or "/tmp", f"pull-{spec.rank}")  # noqa: S108 - a node dir
    out, rc = posixpath.join(d, "out"), posixpath.join(d, "rc")
    argv = list(spec.runtime)
    if spec.kind == "docker" and spec.auth_dir:
        argv += ["--config", spec.auth_dir]
    argv += ["pull"]
    if spec.kind == "podman":
        argv += ["--authfile", posixpath.join(spec.auth_dir, "auth.json"),
                 *_tls_flags(spec, registry_of(spec.image))]
    argv.append(spec.image)
    q = shlex.quote
    script = (f"mkdir -p {q(d)} && rm -f {q(rc)} && {{ [ -f {q(spec.auth_dir)}/auth.json ] || "
              f"echo '{{}}' > {q(spec.auth_dir)}/auth.json; }} && "
              f"nohup sh -c {q(shlex.join(argv) + f' > {q(out)} 2>&1; echo $? > {q(rc)}')} "
              f"> /dev/null 2>&1 < /dev/null &")
    await t.run(["sh", "-c", f"mkdir -p {q(spec.auth_dir)} && chmod 700 {q(spec.auth_dir)} && {script}"],
                check=True, timeout=60)
    log(f"{label}: pulling {spec.image}")
    seen = 0
    deadline = time.monotonic() + PULL_TIMEOUT_S
    code: int | None = None
    while code is None:
        await anyio.sleep(0.5)
        res = await t.run(["sh", "-c", f"cat {q(rc)} 2>/dev/null; echo ---; tail -c +{seen + 1} {q(out)} 2>/dev/null"],
                          timeout=60, idempotent=True)
        head, _, text = res.stdout.partition("---\n")
        if text:
            seen += len(text.encode())
            for line in text.splitlines():
                if line.strip():
                    log(f"{label}: {line.strip()[-200:]}")
        if head.strip().isdigit():
            code = int(head.strip())
            if seen == 0 or text:
                continue
        if time.monotonic() > deadline:
            raise image_error(f"pulling {spec.image} took more than {PULL_TIMEOUT_S:g}s", "check the registry")
    full = await t.run(["sh", "-c", f"cat {q(out)}; rm -rf {q(d)}"], timeout=60)
    if code != 0:
        if not _healed and await _heal(t, spec, full.stdout):
            return await pull(t, spec, log, label, _healed=True)
        raise classify_pull(spec.image, full.stdout)


async def node_arch(t: Transport) -> str:
    res = await t.run(["uname", "-m"], timeout=30, idempotent=True)
    m = res.stdout.strip()
    return _ARCH.get(m, m)


async def check_arch(t: Transport, spec: ContainerSpec) -> None:
    res = await _rt(t, spec, ["image", "inspect", "--format", "{{.Architecture}}", spec.image], timeout=60)
    have, want = res.stdout.strip(), await node_arch(t)
    if res.ok and have and want and have != want:
        raise image_error(f"container image {spec.image} is built for {have}, but the node runs {want}",
                   f"use a {want} (or multi-arch) build of the image")


async def _node_ulimits(t: Transport) -> list[tuple[int, int]]:
    """podman sets high rlimits by default, which a runtime without CAP_SYS_RESOURCE cannot:
    the container gets the node's own hard limits, or lower ones where the runtime refuses
    those (tried in this order)."""
    res = await t.run(["sh", "-c", "ulimit -Hn; ulimit -Hu"], timeout=30, idempotent=True)
    return _limits(res.stdout.split())


async def create(t: Transport, spec: ContainerSpec, limits: list[tuple[int, int]] | None = None) -> None:
    """``run -d`` the container: host network and PID namespace, the binds at their paths,
    GPU flags, ``run_options`` last (they may override); PID 1 only sleeps."""
    args = ["run", "-d", "--name", spec.name,
            "--label", f"{LABEL_CLUSTER}={spec.cluster_tag}", "--label", f"{LABEL_RANK}={spec.rank}",
            "--network", "host", "--pid", "host", "--entrypoint", "/bin/sh"]
    if spec.shared:  # what the leak pass must unbind when only the label is left to go by
        args += ["--label", f"{LABEL_SHARED}={json.dumps(spec.shared)}"]
    for src, dst in spec.binds:
        args += ["-v", f"{src}:{dst}:rslave" if src in spec.shared else f"{src}:{dst}"]
    for k, v in spec.env.items():
        args += ["-e", f"{k}={v}"]
    args += gpu_flags(spec.kind, spec.gpu_vendor,
                      await amd_device_gids(t) if spec.gpu_vendor == "amd" else ())
    # PID 1 first writes whether the image can run the agent (python3, bash) into the bound
    # node dir (read by check_inside without another exec), then only sleeps.
    probe = f"( {_CHECK} ) > {shlex.quote(_check_file(spec))} 2>&1; " if spec.auth_dir else ""
    tail = [*spec.run_options, spec.image, "-c", probe + _KEEPALIVE]
    await t.run(["mkdir", "-p", *[src for src, _ in spec.binds], *([spec.auth_dir] if spec.auth_dir else [])],
                check=True, timeout=60)
    tries: list[tuple[int, int] | None] = [None]
    if spec.kind == "podman":
        tries = list(limits or await _node_ulimits(t))
    res = RunResult(1, "", "")
    for lim in tries:
        extra = ["--ulimit", f"nofile={lim[0]}:{lim[0]}", "--ulimit", f"nproc={lim[1]}:{lim[1]}"] if lim else []
        res = await _rt(t, spec, [*args, *extra, *tail], timeout=300)
        if res.ok or "setting rlimit" not in res.stderr:
            break
        await _rt(t, spec, ["rm", "-f", spec.name], timeout=120)
    if not res.ok:
        await remove(t, spec)
        hint = "check docker.run_options and the image"
        if spec.gpu_vendor == "nvidia":
            hint += ("; NVIDIA GPUs need the NVIDIA container toolkit on the node (docker), or its CDI"
                     " spec (podman: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml)")
        elif spec.gpu_vendor == "amd":
            hint += "; AMD GPUs need /dev/kfd and /dev/dri on the node (the amdgpu driver)"
        raise image_error(f"the container of {spec.image} did not start", hint, res.stderr.strip() or res.stdout.strip())


async def remove(t: Transport, spec: ContainerSpec) -> None:
    """Remove the container (running or not), its shared mount points and the cluster's
    registry credentials."""
    if not spec.runtime:
        return
    await _rt(t, spec, ["rm", "-f", "-t", "5", spec.name] if spec.kind == "podman" else ["rm", "-f", spec.name],
              timeout=120)
    await unshare_binds(t, spec)
    if spec.auth_dir:
        await t.run(["rm", "-rf", spec.auth_dir], timeout=60)


async def stop(t: Transport, spec: ContainerSpec) -> None:
    if spec.runtime:
        await _rt(t, spec, ["stop", "-t", "5", spec.name], timeout=120)


async def remove_tagged(t: Transport, cluster_tag: str, runtime: Sequence[str]) -> int:
    """Remove every container labelled with this cluster tag on the node (leaks)."""
    spec = ContainerSpec(image="", name="", runtime=list(runtime))
    res = await _rt(t, spec, ["ps", "-aq", "--filter", f"label={LABEL_CLUSTER}={cluster_tag}"], timeout=60)
    ids = res.stdout.split()
    if ids:
        fmt = f'{{{{index .Config.Labels "{LABEL_SHARED}"}}}}'
        labels = await _rt(t, spec, ["inspect", "--format", fmt, *ids], timeout=60)
        await _rt(t, spec, ["rm", "-f", *ids], timeout=120)
        for line in labels.stdout.splitlines():
            try:
                paths = json.loads(line) if line.strip().startswith("[") else []
            except ValueError:
                paths = []
            if paths and all(isinstance(p, str) and p.startswith("/") for p in paths):
                await unshare_binds(t, ContainerSpec(image="", name="", shared=paths))
    return len(ids)


_CHECK = r"""
py=""; for p in python3 python; do if command -v "$p" >/dev/null 2>&1; then py="$p"; break; fi; done
if [ -z "$py" ]; then echo "nopython"; exit 0; fi
"$py" -c 'import sys; print("python", "%d.%d" % sys.version_info[:2]); sys.exit(0 if sys.version_info >= (3, 8) else 3)' || { echo oldpython; exit 0; }
command -v bash >/dev/null 2>&1 || { echo nobash; exit 0; }
echo ok
"""


async def exec_argv(spec: ContainerSpec, argv: Sequence[str], *, interactive: bool = True,
                    env: dict[str, str] | None = None) -> list[str]:
    """The node-side argv that runs ``argv`` in the container."""
    out = [*spec.runtime, "exec"] + (["-i"] if interactive else [])
    for k, v in (env or {}).items():
        out += ["-e", f"{k}={v}"]
    return [*out, spec.name, *argv]


def _check_file(spec: ContainerSpec) -> str:
    return posixpath.join(spec.auth_dir, "image-check")


async def check_inside(t: Transport, spec: ContainerSpec) -> None:
    """The agent needs python3 >= 3.8 and bash in the image (it runs inside). PID 1 wrote
    the answer into the bound node dir; without one (no node dir), ask with an exec."""
    if spec.auth_dir:
        f = shlex.quote(_check_file(spec))
        res = await t.run(["sh", "-c", f"i=0; while [ $i -lt 300 ]; do if grep -qE '^(ok|no|old)' {f} 2>/dev/null;"
                                       f" then cat {f}; exit 0; fi; i=$((i+1)); sleep 0.05; done; cat {f}"],
                          timeout=60)
    else:
        res = await t.run(await exec_argv(spec, ["/bin/sh", "-c", _CHECK]), timeout=60)
    word = (res.stdout.strip().splitlines() or ["?"])[-1]
    if word == "ok":
        return
    what = {"nopython": "no python3", "oldpython": "a python3 older than 3.8",
            "nobash": "no bash"}.get(word, f"an unusable shell ({(res.stderr or res.stdout).strip()[-200:]})")
    raise image_error(f"container image {spec.image} has {what}: skyd's node agent runs inside the"
               " container and needs python3 >= 3.8 and bash",
               "use an image with python3 and bash (most ML images have both), or build one"
               " FROM this image that installs them")


async def check_gpus(t: Transport, spec: ContainerSpec) -> None:
    """The GPUs ordered are visible inside the container."""
    if not spec.gpu_vendor or spec.gpu_count <= 0:
        return
    if spec.gpu_vendor == "nvidia":
        probe = "nvidia-smi -L 2>/dev/null | grep -c '^GPU'"
    else:
        # ROCm needs both: the compute interface (kfd) and one render node per GPU
        probe = "if [ -e /dev/kfd ]; then ls /dev/dri/renderD* 2>/dev/null | wc -l; else echo 0; fi"
    res = await t.run(await exec_argv(spec, ["/bin/sh", "-c", probe]), timeout=60)
    seen = int((res.stdout.split() or ["0"])[0]) if (res.stdout.split() or ["0"])[0].isdigit() else 0
    if seen < spec.gpu_count:
        how = ("the NVIDIA container toolkit (nvidia-container-toolkit; for podman `nvidia-ctk cdi"
               " generate`)" if spec.gpu_vendor == "nvidia" else "/dev/kfd and /dev/dri on the node (amdgpu driver)")
        raise image_error(f"the container of {spec.image} sees {seen} GPU(s), {spec.gpu_count:g} were ordered",
                   f"install {how}")


async def ensure(t: Transport, spec: ContainerSpec, log: LogFn, *, creds: RegistryLogin | None = None,
                 want: str = "", label: str = "") -> ContainerSpec:
    """Make the node's container run (found again, started again, or created: runtime,
    login, pull, checks). Fills ``spec.runtime``. A failure leaves no container behind."""
    label = label or f"node {spec.rank}"
    facts = await probe(t, spec, want)
    rt_words = facts.get("runtime") or ["none"]
    if rt_words[0] == "none":
        spec.runtime = await find_runtime(t, log, want=want, label=label)  # installs one
        facts = await probe(t, spec, want)
    elif rt_words[0] != "known":
        spec.runtime = parse_runtimes(" ".join(rt_words))[0]
    st = (facts.get("state") or ["-"])[0]
    if st == "running":
        return spec
    if st != "-":
        if spec.shared:  # stop/down of the node's mounts undid them: before runc binds again
            await share_binds(t, spec)
        res = await _rt(t, spec, ["start", spec.name], timeout=120)
        if res.ok:
            log(f"{label}: container {spec.name} started again")
            return spec
        await remove(t, spec)  # a container that cannot start: made again below
    try:
        if spec.shared:  # first: a node that cannot share them fails before any pull
            await share_binds(t, spec)
        if creds is not None:
            await login(t, spec, creds, log)
        img = facts.get("image") or ["absent"]
        if img[0] == "present":
            log(f"{label}: image {spec.image} is on the node")
            have = img[1] if len(img) > 1 else ""
            want_arch = _ARCH.get((facts.get("arch") or [""])[0], (facts.get("arch") or [""])[0])
            if have and want_arch and have != want_arch:
                raise image_error(f"container image {spec.image} is built for {have}, but the node runs {want_arch}",
                           f"use a {want_arch} (or multi-arch) build of the image")
        else:
            await pull(t, spec, log, label)
            await check_arch(t, spec)
        if spec.gpu_vendor == "nvidia" and spec.kind == "podman":
            await nvidia_cdi(t, log, label)
        await create(t, spec, _limits(facts.get("limits") or []))
        await check_inside(t, spec)
        await check_gpus(t, spec)
    except BaseException:
        with anyio.CancelScope(shield=True), anyio.move_on_after(120):
            await remove(t, spec)
        raise
    log(f"{label}: container {spec.name} of {spec.image} running ({spec.kind}, host network)")
    return spec


__all__ = [
    "DOCKER_ENVS",
    "amd_device_gids",
    "share_binds",
    "unshare_binds",
    "ContainerRequest",
    "ContainerSpec",
    "RegistryLogin",
    "check_image",
    "classify_pull",
    "container_name",
    "ensure",
    "gpu_flags",
    "image_of",
    "registry_of",
    "remove",
    "remove_tagged",
    "state",
    "stop",
]
