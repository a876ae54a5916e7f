"""The asyncssh client of one SSH connection: checks the host's key against known_hosts,
records a new host's key in skyd's trust-on-first-use file (refusing a changed key, or any
unknown one when strict), and notices a lost connection.

asyncssh is imported here: skyd.transports.ssh imports this module when it first connects.
"""

from __future__ import annotations

import asyncssh

from skyd.transports.ssh_hosts import (
    KNOWN_HOSTS_LOCK,
    SSHTarget,
    known_hosts_name,
    known_hosts_path,
)


class HostKeyClient(asyncssh.SSHClient):
    def __init__(self, target: SSHTarget, known: asyncssh.SSHKnownHosts, strict: bool) -> None:
        self.target = target
        self.known = known
        self.strict = strict
        self.lost = False
        self.hostkey_problem: str | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        # Called only when the key matched nothing in known_hosts.
        keys = self.known.match(host, addr, port if port != 22 else None)[0]
        if keys:
            self.hostkey_problem = "changed"
            return False
        if self.strict:
            self.hostkey_problem = "unknown"
            return False
        name = known_hosts_name(host, port)
        line = f"{name} {key.export_public_key('openssh').decode().strip()}\n"
        p = known_hosts_path()
        p.parent.mkdir(parents=True, exist_ok=True)
        with KNOWN_HOSTS_LOCK, open(p, "a") as f:  # small append, once per new host
            f.write(line)
        return True
