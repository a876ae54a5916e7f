"""The network rule, enforced: an audit hook that refuses (and records) every connection or
name lookup outside 127.0.0.0/8 and ::1.

Every test runs under it (tests/conftest.py, ``network_guard``): the test process calls
``install()`` (refusals go to ``VIOLATIONS``), and every process the tests start (daemons,
CLIs) gets this directory first on PYTHONPATH and ``SKYD_NETGUARD_LOG=<file>``: Python imports
``sitecustomize`` at start-up, the hook is installed, and each refused attempt appends a line
to the file (each test asserts nothing was refused). Allowed: 127.0.0.0/8, ::1, AF_UNIX, the
unspecified address (binds), "localhost" and this machine's own host name.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from typing import Any

VIOLATIONS: list[str] = []
_INSTALLED = False
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


def _own_names() -> set[str]:
    """This machine's own host name (resolved from /etc/hosts, not sent anywhere)."""
    import socket

    try:
        return {socket.gethostname()} - {""}
    except OSError:
        return set()


def _allowed(host: Any) -> bool:
    if host is None or host == "" or host == b"":
        return True  # a bind to "any" (servers), or a Unix socket
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    host = str(host).split("%", 1)[0]
    if host in _LOCAL_NAMES or host in _OWN:
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # a name: resolving it is already a packet out
    return ip.is_loopback or ip.is_unspecified  # 0.0.0.0 / :: are binds (or this host)


_OWN: set[str] = set()


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect":
        addr = args[1]
        if not isinstance(addr, tuple):
            return  # AF_UNIX
        host = addr[0]
    elif event == "socket.getaddrinfo":
        host = args[0]
    else:
        return
    if _allowed(host):
        return
    line = f"{event} {host!r} (pid {os.getpid()})"
    VIOLATIONS.append(line)
    log = os.environ.get("SKYD_NETGUARD_LOG")
    if log:
        with open(log, "a") as f:
            f.write(line + "\n")
    raise PermissionError(f"network rule: {event} to {host!r} refused (tests reach 127.0.0.0/8 only)")


def install() -> None:
    global _INSTALLED
    if not _INSTALLED:
        _OWN.update(_own_names())  # before the hook: gethostname is not a lookup
        sys.addaudithook(_hook)
        _INSTALLED = True


if os.environ.get("SKYD_NETGUARD_LOG"):
    install()


def _census(path: str) -> None:
    """SKYD_TEST_PROC_LOG=<file>: each Python process the tests start appends, when it exits
    normally, its command and CPU seconds (user+sys, its reaped children included): which
    kinds of process the suite's CPU goes to."""
    import atexit

    def record() -> None:
        t = os.times()
        argv = " ".join(sys.argv[:3])[:200].replace("\t", " ").replace("\n", " ")
        try:
            with open(path, "a") as f:
                f.write(f"{t.user + t.system:.3f}\t{t.children_user + t.children_system:.3f}\t{argv}"
                        f"\t{os.environ.get('PYTEST_CURRENT_TEST', '').split(' ')[0]}\n")
        except OSError:
            pass

    atexit.register(record)


if os.environ.get("SKYD_TEST_PROC_LOG"):
    _census(os.environ["SKYD_TEST_PROC_LOG"])
