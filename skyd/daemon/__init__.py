"""The daemon core: one process, its store, the request registry and context that
features plug verbs, reads and start-up hooks into (docs/daemon.md). Features import the
names below; the core imports no feature."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyd import face

_FACE = {
    "Daemon": "app",
    "Host": "host",
    "KV": "store",
    "MAX_ID": "http",
    "ReadContext": "context",
    "RequestContext": "context",
    "Store": "store",
    "add_warner": "request_config",
    "int_param": "http",
    "main": "app",
    "number": "http",
    "on_shutdown": "registry",
    "on_startup": "registry",
    "register_read": "registry",
    "register_verb": "registry",
}
__all__ = [
    "Daemon", "Host", "KV", "MAX_ID", "ReadContext", "RequestContext", "Store", "add_warner",
    "int_param", "main", "number", "on_shutdown", "on_startup", "register_read",
    "register_verb", "schema",
]
__getattr__ = face.lazy(__name__, _FACE)

if TYPE_CHECKING:
    from skyd.daemon.app import Daemon, main
    from skyd.daemon.context import ReadContext, RequestContext
    from skyd.daemon.host import Host
    from skyd.daemon.http import MAX_ID, int_param, number
    from skyd.daemon.registry import on_shutdown, on_startup, register_read, register_verb
    from skyd.daemon.request_config import add_warner
    from skyd.daemon.store import KV, Store
