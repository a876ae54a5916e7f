"""A daemon running in Kubernetes (``SKYD_HOST=k8s://CONTEXT/NAMESPACE``), reached through
the API server's pod ``exec`` (skyd.transports.kube), as ``kubectl exec`` would.

``skyd daemon deploy k8s://…`` runs the daemon as the one-replica StatefulSet ``skyd`` (pod
``skyd-0``). A client reaches it the way it reaches an SSH host: every HTTP connection is
carried by one exec session running ``skyd daemon dial-stdio`` in the pod (a byte relay to
the daemon's Unix socket; ``dial_argv``). Clients (the CLI's stdlib client, the async SDK,
the TUI) talk to a private local relay socket (``remote.LocalRelay``) whose connections
``stdlib_carrier`` hands to exec sessions over a stdlib WebSocket (skyd.sdk.kubews), or, for
kubeconfig users of exec plugins and auth providers, ``KubeRelayServer`` pumps through the
Kubernetes client library's credentials and skyd's aiohttp exec transport.

URL forms (as kubectl users would expect): ``k8s://CONTEXT/NAMESPACE``; ``k8s:///NAMESPACE``
(the kubeconfig's current context); ``k8s://CONTEXT`` and ``k8s://`` (the context's own
namespace, else ``default``). A ``/`` inside a context name (EKS ARNs) is written ``%2F``.

Parsing is stdlib only (the one-shot CLI imports this on its fast path); aiohttp and the
kubeconfig client are imported only when a connection is made.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

from skyd.errors import InvalidSpecError, SkydError

SCHEME = "k8s://"
DEFAULT_NAME = "skyd"  # the StatefulSet; its one pod is ``skyd-0``
CONTAINER = "skyd"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
#: what runs in the pod for each connection: ``skyd daemon dial-stdio`` of the skyd the
#: StatefulSet runs ($SKYD_BIN). Once the daemon's socket is there and the image has python3,
#: the same byte relay as a stdlib script (skyd.transports.relay.RELAY, ``python3 -S``)
#: instead: a process start of ~20 ms rather than skyd's own (a frozen single file unpacks
#: itself first).
_DIAL = ('if [ -S "$SKYD_SOCKET" ] && command -v python3 >/dev/null 2>&1; then '
         'exec python3 -S -c "$1" "$SKYD_SOCKET"; fi; exec "${SKYD_BIN:-skyd}" daemon dial-stdio')


class KubeTarget(NamedTuple):
    """A daemon in a Kubernetes namespace: the kubeconfig context (None: the current one),
    the namespace (None: the context's own, else ``default``) and the StatefulSet's name."""

    context: str | None = None
    namespace: str | None = None
    name: str = DEFAULT_NAME

    def url(self) -> str:
        ctx = quote(self.context, safe=":@_.-") if self.context else ""
        out = f"{SCHEME}{ctx}" + (f"/{self.namespace}" if self.namespace else "")
        return out + (f"?name={self.name}" if self.name != DEFAULT_NAME else "")

    @property
    def pod(self) -> str:
        return f"{self.name}-0"

    def destination(self) -> list[str]:
        """What a user would type to reach it with kubectl (for hints)."""
        out = ["kubectl"]
        if self.context:
            out += ["--context", self.context]
        if self.namespace:
            out += ["-n", self.namespace]
        return out


def dial_argv() -> list[str]:
    from skyd.transports.relay_script import RELAY

    return ["/bin/sh", "-c", _DIAL, "sh", RELAY]


def is_k8s(url: str) -> bool:
    return url.strip().startswith(SCHEME)


def parse_k8s(url: str) -> KubeTarget:
    text = url.strip()
    if not text.startswith(SCHEME):
        raise InvalidSpecError(f"unsupported daemon host {url!r}", field="SKYD_HOST",
                               hint="use k8s://CONTEXT/NAMESPACE")
    rest, _, query = text[len(SCHEME):].partition("?")
    name = DEFAULT_NAME
    for part in filter(None, query.split("&")):
        k, _, v = part.partition("=")
        if k != "name":
            raise InvalidSpecError(f"unknown option {k!r} in daemon host {url!r}",
                                   field="SKYD_HOST", hint="known options: name")
        name = unquote(v)
    ctx_raw, slash, ns_raw = rest.rpartition("/") if "/" in rest else (rest, "", "")
    ctx = unquote(ctx_raw) or None
    ns = unquote(ns_raw) or None
    if slash and "/" in ctx_raw:
        raise InvalidSpecError(f"daemon host {url!r} has more than CONTEXT/NAMESPACE",
                               field="SKYD_HOST",
                               hint="use k8s://CONTEXT/NAMESPACE; write a '/' inside a "
                                    "context name as %2F")
    if ns is not None and not _DNS_LABEL.match(ns):
        raise InvalidSpecError(f"namespace {ns!r} in daemon host {url!r} is not a valid "
                               "Kubernetes namespace", field="SKYD_HOST",
                               hint="lower-case letters, digits and '-' (at most 63)")
    if not _DNS_LABEL.match(name) or len(name) > 50:
        raise InvalidSpecError(f"name {name!r} in daemon host {url!r} is not a valid "
                               "StatefulSet name", field="SKYD_HOST",
                               hint="lower-case letters, digits and '-' (at most 50)")
    if ctx is not None and (ctx.startswith("-") or any(c in ctx for c in "\0\n")):
        raise InvalidSpecError(f"context {ctx!r} in daemon host {url!r} is not a context "
                               "name", field="SKYD_HOST", hint="use k8s://CONTEXT/NAMESPACE")
    return KubeTarget(context=ctx, namespace=ns, name=name)


# -- the kubeconfig ---------------------------------------------------------------------------

def kubeconfig_path() -> Path:
    raw = os.environ.get("KUBECONFIG", "")
    first = raw.split(os.pathsep)[0] if raw else ""
    return Path(first).expanduser() if first else Path.home() / ".kube" / "config"


_LOADED: dict[tuple[str, float], Any] = {}


def load_kubeconfig() -> Any:
    """The kubeconfig's document (parsed once per process and file version; yaml's C loader
    where there is one)."""
    import yaml

    p = kubeconfig_path()
    key = (str(p), p.stat().st_mtime)
    if key not in _LOADED:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            doc = yaml.load(p.read_text(), Loader=loader) or {}  # noqa: S506 - a safe loader
        except yaml.YAMLError as e:
            raise ValueError(str(e)) from None
        if not isinstance(doc, dict):
            raise ValueError("not a kubeconfig (no mapping at the top)")
        _LOADED[key] = doc
    return _LOADED[key]


def resolve(t: KubeTarget) -> KubeTarget:
    """``t`` with its context and namespace filled in from the kubeconfig (the current
    context; the context's namespace, else ``default``). A clear error when the kubeconfig
    or the context is missing."""
    p = kubeconfig_path()
    try:
        doc = load_kubeconfig()
    except FileNotFoundError:
        raise SkydError(f"no kubeconfig at {p} (needed for {t.url()})",
                        hint="set KUBECONFIG or create ~/.kube/config") from None
    except (OSError, ValueError) as e:
        raise SkydError(f"kubeconfig {p} is unreadable: {e}", hint="fix the file") from None
    contexts = {str(c.get("name")): (c.get("context") or {})
                for c in (doc.get("contexts") or []) if isinstance(c, dict) and c.get("name")}
    ctx = t.context or str(doc.get("current-context") or "")
    if not ctx:
        raise InvalidSpecError(f"{t.url()} names no context and the kubeconfig {p} has no "
                               "current context", field="SKYD_HOST",
                               hint="use k8s://CONTEXT/NAMESPACE (contexts: "
                                    f"{', '.join(sorted(contexts)) or 'none'})")
    if ctx not in contexts:
        raise InvalidSpecError(f"no context {ctx!r} in the kubeconfig {p}", field="SKYD_HOST",
                               hint="known contexts: " + (", ".join(sorted(contexts)) or "none"))
    ns = t.namespace or str(contexts[ctx].get("namespace") or "default")
    return KubeTarget(context=ctx, namespace=ns, name=t.name)


def endpoint(t: KubeTarget) -> Any:
    """The API server of ``t``'s context (a ``kubews.Endpoint``) read straight from the
    kubeconfig when its user
    authenticates with a token (``token``/``tokenFile``) or a client certificate, and its
    cluster with a CA (file or data) or ``insecure-skip-tls-verify``: what a connection needs
    without importing the Kubernetes client library (~0.3 s, 2 s and more on a busy machine).
    None for anything else (exec plugins, auth providers): the caller then uses the client
    library's own loader (skyd.clouds.kubernetes.api)."""
    import base64
    import ssl
    import tempfile

    from skyd.sdk.kubews import Endpoint

    p = kubeconfig_path()
    try:
        doc = load_kubeconfig()
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None

    def named(kind: str, name: Any) -> dict[str, Any] | None:
        for item in doc.get(kind + "s") or []:
            if isinstance(item, dict) and item.get("name") == name:
                body = item.get(kind)
                return body if isinstance(body, dict) else {}
        return None

    ctx = named("context", t.context)
    cluster = named("cluster", (ctx or {}).get("cluster"))
    user = named("user", (ctx or {}).get("user"))
    if ctx is None or cluster is None or user is None or not cluster.get("server"):
        return None
    if cluster.get("proxy-url") or cluster.get("tls-server-name"):
        return None  # the library handles these
    if set(user) - {"token", "tokenFile", "client-certificate", "client-certificate-data",
                    "client-key", "client-key-data"}:
        return None  # exec, auth-provider, username/password, impersonation: the library

    def rel(path: str) -> str:
        return str((p.parent / Path(path).expanduser()).resolve())

    server = str(cluster["server"]).rstrip("/")
    headers: dict[str, str] = {}
    token = user.get("token")
    if not token and user.get("tokenFile"):
        try:
            token = Path(rel(str(user["tokenFile"]))).read_text().strip()
        except OSError:
            return None
    if token:
        headers["Authorization"] = f"Bearer {token}"
    tls: ssl.SSLContext | None = None
    if server.startswith("https"):
        try:
            if cluster.get("certificate-authority-data"):
                ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
                tls = ssl.create_default_context(cadata=ca)
            elif cluster.get("certificate-authority"):
                tls = ssl.create_default_context(cafile=rel(str(cluster["certificate-authority"])))
            else:
                tls = ssl.create_default_context()
            if cluster.get("insecure-skip-tls-verify"):
                tls.check_hostname = False
                tls.verify_mode = ssl.CERT_NONE
            if user.get("client-certificate-data") or user.get("client-certificate"):
                with tempfile.TemporaryDirectory(prefix="skyd-kc-") as d:  # 0700, removed at once
                    def pem(key: str) -> str:
                        if user.get(key + "-data"):
                            f = Path(d) / key
                            fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                            with os.fdopen(fd, "wb") as out:
                                out.write(base64.b64decode(user[key + "-data"]))
                            return str(f)
                        return rel(str(user.get(key) or ""))

                    tls.load_cert_chain(pem("client-certificate"), pem("client-key"))
        except (OSError, ValueError, ssl.SSLError):
            return None
    return Endpoint(server, headers, tls)


# -- the channel: exec sessions pumped by one background event loop ----------------------------

def stdlib_carrier(t: KubeTarget, ep: Any, report: Any) -> Any:
    """``carry(conn)`` for ``remote.LocalRelay``: each accepted connection becomes an exec
    session (skyd.sdk.kubews, stdlib only) running ``dial_argv()`` in the daemon's pod."""
    from skyd.sdk import kubews

    argv = dial_argv()
    assert t.namespace is not None

    def open_exec() -> kubews.ExecSocket:
        return kubews.ExecSocket(ep, str(t.namespace), t.pod, CONTAINER, argv)

    def carry(conn: Any) -> None:
        kubews.carry(conn, open_exec, report)

    return carry


class KubeRelayServer:
    """Serves a Unix socket path: every connection becomes one exec session in the daemon's
    pod, made by the Kubernetes client library's loader (for kubeconfig users that
    authenticate with exec plugins or auth providers; others take ``stdlib_carrier``). Runs
    its own event loop in a daemon thread, so a blocking client (the stdlib CLI) can use it."""

    def __init__(self, target: KubeTarget, path: str) -> None:
        import asyncio
        import threading

        self.target = target
        self.path = path
        self.error = ""  # the last exec failure (for the client's message)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._listener: Any = None
        self._api: Any = None
        self._stop: Any = None  # asyncio.Event, made on the loop
        self._thread = threading.Thread(target=self._main, name="skyd-kube-relay", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._failed is not None:
            raise self._failed

    def _main(self) -> None:
        import asyncio

        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        import asyncio

        from skyd.transports import relay

        self._stop = asyncio.Event()
        try:
            self._listener = relay.RelayListener(self._open_pipe, self.target.url(), spares=0)
            await self._listener.start(unix_path=self.path)
        except BaseException as e:  # noqa: BLE001 - handed to the constructor's caller
            self._failed = e
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            self._listener.close()
            if self._api is not None:
                await self._api.close()

    async def _open_pipe(self) -> Any:
        from skyd.transports.kube import KubeTransport

        t = self.target
        assert t.namespace is not None and t.context is not None
        try:
            if self._api is None:
                from skyd.clouds.kubernetes.api import ContextAPI

                self._api = ContextAPI(t.context, t.namespace)
            conn = await self._api.exec_conn()
            tr = KubeTransport(conn, t.namespace, t.pod, CONTAINER)
            return await tr.open_stream(dial_argv())
        except Exception as e:
            self.error = str(e)
            raise

    def close(self) -> None:
        if self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                return
            self._thread.join(10)
