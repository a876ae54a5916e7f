"""sd_notify without systemd bindings: one datagram to $NOTIFY_SOCKET."""

from __future__ import annotations

import os
import socket


def sd_notify(state: str, env: dict[str, str] | None = None) -> bool:
    """Send ``state`` (e.g. ``READY=1``) to $NOTIFY_SOCKET; False when unset or it fails.

    Supports filesystem paths and abstract sockets (``@name``).
    """
    addr = (env if env is not None else os.environ).get("NOTIFY_SOCKET")
    if not addr:
        return False
    target = "\0" + addr[1:] if addr.startswith("@") else addr
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(target)
            s.sendall(state.encode())
        return True
    except OSError:
        return False
