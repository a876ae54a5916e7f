"""``ssh_node_pools.yaml``: SkyPilot's format, so users can copy ``~/.sky/ssh_node_pools.yaml``.

    my-box:                       # pool name (used as infra: ssh/my-box)
      user: alice                 # pool defaults
      identity_file: ~/.ssh/id_ed25519
      port: 22
      proxy_jump: bastion         # optional
      hosts:
        - 10.0.0.1                # an IP, a hostname, or an ~/.ssh/config alias
        - ip: 10.0.0.2
          user: bob
          port: 2222
          identity_file: ~/.ssh/other

Found at ``$SKYD_SSH_NODE_POOLS`` if set, else ``<config_dir>/ssh_node_pools.yaml``
(``SKYD_CONFIG_DIR``, default ``~/.config/skyd``). Passwords are refused: keys only.
Stdlib + yaml only (the CLI imports this).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyd import paths
from skyd import settings as knobs
from skyd.errors import InvalidSpecError, NotFoundError

_HOST_KEYS = {"ip", "user", "port", "identity_file", "proxy_jump", "password"}
_POOL_KEYS = {"hosts", "user", "port", "identity_file", "proxy_jump", "password"}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class PoolHost:
    pool: str
    ip: str  # address or ~/.ssh/config alias, as written
    user: str | None
    port: int | None
    identity_file: str | None
    proxy_jump: str | None

    @property
    def key(self) -> str:
        """Identity of the host for allocation: user@ip:port."""
        return f"{self.user or ''}@{self.ip}:{self.port or 22}"

    @property
    def name(self) -> str:
        """Display / instance_type name: ip, or ip:port when the port is not the default."""
        return self.ip if not self.port or self.port == 22 else f"{self.ip}:{self.port}"

    def target(self) -> Any:
        from skyd.transports.ssh import SSHTarget

        return SSHTarget(self.ip, self.port, self.user, self.identity_file, self.proxy_jump)

    def ssh_dict(self) -> dict[str, Any]:
        return {
            "host": self.ip,
            "port": self.port,
            "user": self.user,
            "identity_file": self.identity_file,
            "proxy_jump": self.proxy_jump,
        }


@dataclass(frozen=True)
class Pool:
    name: str
    hosts: tuple[PoolHost, ...]

    def host(self, name: str) -> PoolHost | None:
        for h in self.hosts:
            if name in (h.name, h.ip, h.key):
                return h
        return None


def pools_file() -> Path:
    env = knobs.SSH_NODE_POOLS.get()
    if env is not None:
        return env
    return paths.config_dir() / "ssh_node_pools.yaml"


def _port(value: Any, where: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if not 0 < port < 65536:
        raise InvalidSpecError(
            f"port {value!r} is not a TCP port", field=f"{where}.port", hint="use 1-65535"
        )
    return port


def _opt_str(value: Any, where: str, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str | int) or not str(value).strip():
        raise InvalidSpecError(
            f"{key} must be a non-empty string", field=f"{where}.{key}", hint=f"e.g. {key}: ..."
        )
    return str(value).strip()


def _identity(value: Any, where: str) -> str | None:
    s = _opt_str(value, where, "identity_file")
    return os.path.expanduser(s) if s else None


def parse_pools(data: Any, source: str = "ssh_node_pools.yaml") -> dict[str, Pool]:
    """Validate the YAML document; errors name the pool/host and the fix."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidSpecError(
            f"{source} must map pool names to pools",
            hint="e.g.\nmy-pool:\n  user: alice\n  hosts: [10.0.0.1]",
        )
    pools: dict[str, Pool] = {}
    for name, spec in data.items():
        name = str(name)
        where = f"{source}: pool {name!r}"
        if not _NAME_RE.match(name):
            raise InvalidSpecError(
                f"pool name {name!r} is not valid",
                field=where,
                hint="use letters, digits, '.', '_' and '-'",
            )
        if not isinstance(spec, dict):
            raise InvalidSpecError(
                "a pool must be a mapping with 'hosts'", field=where, hint="hosts: [10.0.0.1]"
            )
        unknown = set(map(str, spec)) - _POOL_KEYS
        if unknown:
            raise InvalidSpecError(
                f"unknown key(s) {sorted(unknown)}",
                field=where,
                hint="allowed: " + ", ".join(sorted(_POOL_KEYS - {'password'})),
            )
        if "password" in spec:
            raise InvalidSpecError(
                "password authentication is not supported",
                field=f"{where}.password",
                hint="skyd logs in with SSH keys only: remove 'password', set identity_file "
                "and install the public key (ssh-copy-id)",
            )
        user = _opt_str(spec.get("user"), where, "user")
        port = _port(spec["port"], where) if spec.get("port") is not None else None
        ident = _identity(spec.get("identity_file"), where)
        jump = _opt_str(spec.get("proxy_jump"), where, "proxy_jump")
        raw_hosts = spec.get("hosts")
        if not isinstance(raw_hosts, list) or not raw_hosts:
            raise InvalidSpecError(
                "'hosts' must be a non-empty list", field=f"{where}.hosts", hint="hosts: [10.0.0.1]"
            )
        hosts: list[PoolHost] = []
        seen: set[str] = set()
        for i, h in enumerate(raw_hosts):
            hw = f"{where}.hosts[{i}]"
            if isinstance(h, str | int) and str(h).strip():
                ph = PoolHost(name, str(h).strip(), user, port, ident, jump)
            elif isinstance(h, dict):
                bad = set(map(str, h)) - _HOST_KEYS
                if bad:
                    raise InvalidSpecError(
                        f"unknown key(s) {sorted(bad)}",
                        field=hw,
                        hint="a host is {ip, user, port, identity_file, proxy_jump}",
                    )
                if "password" in h:
                    raise InvalidSpecError(
                        "password authentication is not supported",
                        field=f"{hw}.password",
                        hint="use identity_file with a key installed on the host (ssh-copy-id)",
                    )
                ip = _opt_str(h.get("ip"), hw, "ip")
                if not ip:
                    raise InvalidSpecError("a host needs 'ip'", field=hw, hint="ip: 10.0.0.1")
                ph = PoolHost(
                    name,
                    ip,
                    _opt_str(h.get("user"), hw, "user") or user,
                    _port(h["port"], hw) if h.get("port") is not None else port,
                    _identity(h.get("identity_file"), hw) or ident,
                    _opt_str(h.get("proxy_jump"), hw, "proxy_jump") or jump,
                )
            else:
                raise InvalidSpecError(
                    f"host entry {h!r} is neither an address nor a mapping",
                    field=hw,
                    hint="write '10.0.0.1' or {ip: 10.0.0.1, user: alice}",
                )
            if ph.key in seen:
                raise InvalidSpecError(
                    f"host {ph.name} is listed twice", field=hw, hint="remove the duplicate"
                )
            seen.add(ph.key)
            hosts.append(ph)
        pools[name] = Pool(name, tuple(hosts))
    return pools


def load_pools(path: Path | None = None) -> dict[str, Pool]:
    """All pools; {} when the file does not exist."""
    import yaml

    p = path or pools_file()
    try:
        text = p.read_text()
    except FileNotFoundError:
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise InvalidSpecError(
            f"{p} is not valid YAML: {getattr(e, 'problem', e)}",
            line=(mark.line + 1) if mark is not None else None,
            hint="fix the YAML syntax (indentation, colons)",
        ) from None
    return parse_pools(data, str(p))


def get_pool(name: str, pools: dict[str, Pool] | None = None) -> Pool:
    pools = load_pools() if pools is None else pools
    if name in pools:
        return pools[name]
    import difflib

    close = difflib.get_close_matches(name, list(pools), n=1)
    hint = f"did you mean {close[0]!r}?" if close else (
        f"define it in {pools_file()}" if not pools else "known pools: " + ", ".join(sorted(pools))
    )
    raise NotFoundError(f"no SSH node pool named {name!r}", field="infra", hint=hint)
