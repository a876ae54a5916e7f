"""``~/.slurm/config``: Slurm clusters in SSH-config form, as SkyPilot reads it.

::

    Host mycluster            # the cluster's name (infra: slurm/mycluster[/partition])
      HostName login.example.org
      User alice
      Port 22
      IdentityFile ~/.ssh/id_ed25519
      ProxyJump bastion.example.org

``$SKYD_SLURM_CONFIG`` points elsewhere. sbatch options come from skyd's config.yaml::

    slurm:
      sbatch_options: {time: "4:00:00", account: myacct}   # every cluster
      clusters:
        mycluster: {sbatch_options: {qos: high}}          # this cluster (wins)

Every function here is synchronous and small (file reads): callers run them in a thread.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyd import settings as knobs
from skyd.errors import InvalidSpecError, NotFoundError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")

#: sbatch options skyd sets itself; a user value for one of these is refused.
PROTECTED = frozenset({
    "job-name", "J", "nodes", "N", "ntasks-per-node", "output", "o", "error", "e", "partition",
    "p", "gres", "gpus", "G", "parsable", "wrap", "chdir", "D", "export", "array", "a",
    "dependency", "d", "hold", "H", "wait", "W",
})  # fmt: skip


@dataclass(frozen=True)
class SlurmCluster:
    name: str
    host: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    proxy_jump: str | None = None

    def ssh_dict(self) -> dict[str, Any]:
        return {"host": self.host, "port": self.port, "user": self.user,
                "identity_file": self.identity_file, "proxy_jump": self.proxy_jump}  # fmt: skip


def config_path() -> Path:
    env = knobs.SLURM_CONFIG.get()
    return env if env is not None else Path.home() / ".slurm" / "config"


def parse_config(text: str, source: str = "~/.slurm/config") -> dict[str, SlurmCluster]:
    out: dict[str, SlurmCluster] = {}
    cur: dict[str, str] | None = None
    names: list[str] = []

    def flush() -> None:
        if cur is None:
            return
        for n in names:
            if "*" in n or "?" in n:
                continue  # a pattern block: not a cluster
            port = cur.get("port")
            if port is not None and not port.isdigit():
                raise InvalidSpecError(f"{source}: Host {n}: Port {port!r} is not a number",
                                       field="Port", hint="write e.g. 'Port 22'")  # fmt: skip
            out[n] = SlurmCluster(
                name=n, host=cur.get("hostname", n), port=int(port) if port else None,
                user=cur.get("user"), identity_file=cur.get("identityfile"),
                proxy_jump=cur.get("proxyjump"),
            )

    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, _, val = line.replace("=", " ", 1).partition(" ")
        key, val = key.lower(), val.strip().strip('"')
        if key == "host":
            flush()
            names = val.split()
            for n in names:
                if "*" not in n and "?" not in n and not NAME_RE.match(n):
                    raise InvalidSpecError(
                        f"{source}:{lineno}: cluster name {n!r} is not valid", field="Host",
                        hint="use letters, digits, '-', '_' and '.'")  # fmt: skip
            cur = {}
        elif cur is not None and val:
            cur.setdefault(key, os.path.expanduser(val) if key == "identityfile" else val)
    flush()
    return out


def load_clusters(path: Path | None = None) -> dict[str, SlurmCluster]:
    p = path or config_path()
    try:
        text = p.read_text()
    except FileNotFoundError:
        return {}
    return parse_config(text, str(p))


def get_cluster(name: str, clusters: dict[str, SlurmCluster], path: Path | None = None) -> SlurmCluster:
    if name in clusters:
        return clusters[name]
    import difflib

    near = difflib.get_close_matches(name, list(clusters), n=3)
    known = ", ".join(sorted(clusters)) or "none"
    raise NotFoundError(
        f"no Slurm cluster {name!r} in {path or config_path()} (known: {known})", field="infra",
        hint=(f"did you mean {', '.join(near)}?" if near
              else f"add a 'Host {name}' block (login host, User, IdentityFile) to {path or config_path()}"),
    )  # fmt: skip


def _settings() -> dict[str, Any]:
    from skyd.clouds.settings import section

    return section("slurm")


def sbatch_options(cluster: str, settings: dict[str, Any] | None = None) -> dict[str, str]:
    """The user's sbatch options for ``cluster`` (global, then per cluster). A protected key
    (one skyd sets itself) raises InvalidSpecError naming it."""
    s = _settings() if settings is None else settings
    merged: dict[str, str] = {}
    per = (s.get("clusters") or {}).get(cluster) or {}
    for sec in (s.get("sbatch_options") or {}, per.get("sbatch_options") or {} if isinstance(per, dict) else {}):
        if not isinstance(sec, dict):
            raise InvalidSpecError("slurm.sbatch_options must be a mapping", field="slurm.sbatch_options",
                                   hint='write e.g. sbatch_options: {time: "1:00:00"}')  # fmt: skip
        for k, v in sec.items():
            key = str(k).lstrip("-")
            if key in PROTECTED:
                raise InvalidSpecError(
                    f"slurm.sbatch_options: {key!r} is set by skyd", field="slurm.sbatch_options",
                    hint=f"remove {key!r}; use infra: slurm/<cluster>/<partition> and resources: for placement")
            if not re.match(r"^[A-Za-z][A-Za-z0-9-]*$", key):
                raise InvalidSpecError(f"slurm.sbatch_options: {key!r} is not an option name",
                                       field="slurm.sbatch_options", hint="write e.g. time: 1:00:00")  # fmt: skip
            merged[key] = "" if v is True else str(v)
    return merged
