"""`ssh CLUSTER` (and `ssh CLUSTER-worker1`, scp, rsync, VS Code Remote) from an SSH config
skyd maintains, as SkyPilot does.

- One file per cluster in ``$SKYD_HOME/ssh-config/<cluster>``, written (atomically) each
  time the cluster's handle is saved (launch, start, refresh) and removed at ``down``.
- ``~/.ssh/config`` gets one line, ``Include $SKYD_HOME/ssh-config/*``, at its top (an
  Include inside a Host block would only apply to that host), added once; the launch that
  adds it says so. ``SKYD_SSH_CONFIG=off`` leaves ``~/.ssh/config`` alone (the files are still
  written, for a manual Include).
- Nodes with an SSH address (SSH node pools, every VM cloud): ``HostName``/``Port``/``User``/
  ``IdentityFile``/``ProxyJump`` as skyd itself connects, host keys checked against skyd's
  known_hosts (where skyd recorded them at first contact) and the user's.
- Kubernetes pods have no SSH address: ``ProxyCommand`` runs ``skyd ssh-proxy``, which opens a
  kube exec session into the pod (the same transport the agent is deployed over) and runs
  ``sshd -i`` there on the session's stdin/stdout, with a host key and skyd's client key made
  on first use under the node's skyd directory. The pod's image needs an sshd binary.
- ``local`` nodes have no sshd: ``skyd shell CLUSTER`` opens a shell in a node's namespace.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shlex
import sys
from pathlib import Path
from typing import Any

import anyio

from skyd import paths, settings

HEADER = "# Added by skyd for cluster {name} (`skyd down {name}` removes it)\n"
KEY_NAME = "skyd-ssh-ed25519"


def config_dir() -> Path:
    return paths.home() / "ssh-config"


def user_config() -> Path:
    return Path("~/.ssh/config").expanduser()


def _q(value: str) -> str:
    """An ssh_config argument (quoted when it has spaces)."""
    return f'"{value}"' if any(c.isspace() for c in value) else value


def include_line() -> str:
    return f"Include {_q(str(config_dir() / '*'))}"


def client_key() -> tuple[Path, Path]:
    d = paths.home() / "keys"
    return d / KEY_NAME, d / f"{KEY_NAME}.pub"


def ensure_client_key() -> tuple[Path, str]:
    """skyd's key for nodes reached through a ProxyCommand (0600, made once)."""
    from skyd.transports.ssh_hosts import ensure_key

    priv, _ = client_key()
    return priv, ensure_key(priv)


def skyd_command() -> list[str]:
    """How to run this skyd's CLI from a ProxyCommand."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "skyd.cli.main"]


def host_names(cluster: str, n: int) -> list[str]:
    return [cluster if i == 0 else f"{cluster}-worker{i}" for i in range(n)]


def _known_hosts() -> str:
    from skyd.transports.ssh_hosts import known_hosts_path

    files = [str(known_hosts_path()), "~/.ssh/known_hosts"]
    return " ".join(_q(f) for f in files)


def _pod_user(home: str) -> str | None:
    """The pod's user, from its HOME (sshd in the pod runs as that user and lets only it in):
    /root -> root, /home/NAME -> NAME; unknown otherwise (ssh then sends the local name)."""
    if home.rstrip("/") == "/root":
        return "root"
    parts = home.rstrip("/").split("/")
    if len(parts) == 3 and parts[1] == "home" and parts[2].replace("-", "").replace("_", "").isalnum():
        return parts[2]
    return None


def render(handle: Any) -> str | None:
    """The cluster's Host entries, or None when its nodes are not reached over SSH."""
    nodes = list(handle.nodes or [])
    if not nodes or handle.cloud == "local" or handle.cloud == "slurm":
        return None
    out = [HEADER.format(name=handle.cluster_name)]
    names = host_names(handle.cluster_name, len(nodes))
    for node, host in zip(nodes, names, strict=True):
        ssh = node.ssh or {}
        lines = [f"Host {host}"]
        if ssh.get("host"):
            lines.append(f"  HostName {ssh['host']}")
            if ssh.get("port"):
                lines.append(f"  Port {int(ssh['port'])}")
            if ssh.get("user"):
                lines.append(f"  User {ssh['user']}")
            if ssh.get("identity_file"):
                lines += [f"  IdentityFile {_q(os.path.expanduser(str(ssh['identity_file'])))}",
                          "  IdentitiesOnly yes"]
            if ssh.get("proxy_jump"):
                lines.append(f"  ProxyJump {ssh['proxy_jump']}")
            lines += [f"  UserKnownHostsFile {_known_hosts()}", "  StrictHostKeyChecking yes"]
        elif handle.cloud == "kubernetes" and node.extra.get("context"):
            priv, pub = client_key()
            # the proxy runs from the user's shell: it gets this daemon's view of the infra
            pinned = [f"{k}={os.environ[k]}" for k in
                      ("KUBECONFIG", settings.HOME.name, settings.CONFIG_DIR.name)
                      if os.environ.get(k)]
            proxy = [*(["env", *pinned] if pinned else []), *skyd_command(), "ssh-proxy",
                     "kubernetes", "--context", str(node.extra["context"]),
                     "--namespace", str(node.extra["namespace"]), "--pod", node.instance_id,
                     "--dir", str(node.extra.get("base") or "~/.skyd") + "/sshd",
                     "--public-key", str(pub)]
            user = _pod_user(str(node.extra.get("home") or ""))
            lines += [f"  HostName {node.instance_id}", *([f"  User {user}"] if user else []),
                      f"  IdentityFile {_q(str(priv))}",
                      "  IdentitiesOnly yes",
                      # the pod is authenticated by the kube API (TLS), not by a host key
                      "  StrictHostKeyChecking no", "  UserKnownHostsFile /dev/null",
                      "  LogLevel ERROR",
                      "  ProxyCommand " + shlex.join(proxy).replace("%", "%%")]
        else:
            continue
        out.append("\n".join(lines) + "\n\n")
    return "".join(out) if len(out) > 1 else None


def _atomic_write(path: Path, text: str, mode: int) -> None:
    # a name of its own: two writers at once (threads of one daemon) never share it
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def ensure_include() -> str | None:
    """Add the Include line to ~/.ssh/config once; returns what was done, to be said."""
    if settings.SSH_CONFIG.get() == "off":
        return None
    cfg = user_config()
    line = include_line()
    lock = paths.home() / "ssh-config.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        try:
            text = cfg.read_text()
        except FileNotFoundError:
            text = ""
        if any(ln.strip() == line for ln in text.splitlines()):
            return None
        real = Path(os.path.realpath(cfg))
        real.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        mode = real.stat().st_mode & 0o777 if real.exists() else 0o600
        _atomic_write(real, f"# Added by skyd: `ssh CLUSTER` for skyd's clusters\n{line}\n\n{text}", mode)
    return (f"Added `{line}` to {cfg} (once) so that `ssh CLUSTER` works; remove that line to"
            " undo it, or set SKYD_SSH_CONFIG=off")


def _path(cluster: str) -> Path | None:
    if not cluster or "/" in cluster or cluster.startswith("."):
        return None  # not one plain file name: never written
    return config_dir() / cluster


def write_sync(handle: Any) -> bool:
    """Write (or drop) the cluster's entries; True when it has some. (The Include line is
    added by the provisioning that first makes entries: :func:`ensure_include`.)"""
    path = _path(handle.cluster_name)
    if path is None:
        return False
    text = render(handle)
    if text is None:
        path.unlink(missing_ok=True)
        return False
    if any(n.extra.get("context") and not (n.ssh or {}).get("host") for n in handle.nodes):
        ensure_client_key()
    config_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
    _atomic_write(path, text, 0o600)
    return True


def remove_sync(cluster: str) -> None:
    path = _path(cluster)
    if path is not None:
        path.unlink(missing_ok=True)


async def write(handle: Any) -> bool:
    """Best effort: a failure to write the SSH config never fails the verb."""
    try:
        return await anyio.to_thread.run_sync(write_sync, handle)
    except Exception as e:  # noqa: BLE001
        import logging

        logging.getLogger("skyd.sshconfig").warning("ssh config for %s: %s", handle.cluster_name, e)
        return False


async def remove(cluster: str) -> None:
    try:
        await anyio.to_thread.run_sync(remove_sync, cluster)
    except OSError:
        pass


async def announce(handle: Any, log: Any) -> None:
    """After a provisioning: make sure ~/.ssh/config includes skyd's entries, and say so
    the first time; name the host(s) to ssh to."""
    if render(handle) is None:
        return
    try:
        msg = await anyio.to_thread.run_sync(ensure_include)
    except OSError as e:
        log(f"warning: could not add skyd's SSH config to {user_config()}: {e}")
        return
    if msg:
        log(msg)
