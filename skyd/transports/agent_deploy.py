"""Deploy, start, health-check, upgrade and stop the node agent over any transport.

Every provider whose nodes are machines it reaches through a ``Transport`` (SSH pools, VMs,
later Kubernetes pods and Slurm allocations) runs the agent the same way:

- ``agent_zipapp()``: this build's agent as a zipapp (with bytecode; docs/nodeagent.md),
  built once per process (kept under ``$SKYD_HOME/ssh``; concurrent callers share one build;
  the archive itself is cached per install under the cache directory);
- ``start``: upload the zipapp once per version (``<base>/agent-<sha>.pyz``), write fresh
  agent credentials (TLS key and certificates, 0600; docs/nodeagent.md "Authentication"),
  start the agent detached in its own session
  (``agent_scripts.ENSURE_AGENT``): a running agent of this version is kept, one of another
  version is replaced over the same node dir (the job queue survives: an upgrade);
- ``node_state`` / ``healthy``: the agent's process state on the node, then a Health RPC
  through the transport's byte stream;
- ``shutdown`` (cancel jobs, exit; then make sure the process is gone and mark the node
  stopped), ``remove`` (everything the agent put on the node, and unused zipapps);
- ``ensure``: the repair pass of ``status -r`` / launch on an existing cluster.

The ``local`` provider runs its agents from this install instead of a zipapp, but reaches,
health-checks and stops them through the same calls.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import posixpath
import secrets
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from skyd import paths
from skyd.errors import ClusterStateError, ResourcesUnavailableError, SkydError
from skyd.transports import agent_scripts
from skyd.transports.base import AgentAddress, Transport

# Node states (the same words as skyd.clouds.base.NODE_*).
RUNNING = "running"
STOPPED = "stopped"
TERMINATED = "terminated"
UNKNOWN = "unknown"

_ZIPAPP_CACHE: dict[str, tuple[Path, str]] = {}
_ZIPAPP_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.Lock] = (
    weakref.WeakKeyDictionary()
)


async def agent_zipapp() -> tuple[Path, str]:
    """(path, sha256) of this build's agent zipapp, built once per process under SKYD_HOME.
    Concurrent callers (the nodes of one cluster, the daemon's warm-up) share one build."""
    key = str(paths.home())
    loop = asyncio.get_running_loop()
    lock = _ZIPAPP_LOCKS.setdefault(loop, anyio.Lock())
    async with lock:
        if key in _ZIPAPP_CACHE and _ZIPAPP_CACHE[key][0].exists():
            return _ZIPAPP_CACHE[key]
        from skyd.nodeagent.compat_deps import bundled_zipapp, ensure_compat_deps
        from skyd.nodeagent.zipapp import build_zipapp

        d = paths.home() / "ssh"
        d.mkdir(parents=True, exist_ok=True)
        prebuilt = bundled_zipapp()  # a frozen skyd carries one (no sources to pack)
        if prebuilt is not None:
            data = await anyio.to_thread.run_sync(prebuilt.read_bytes)
            sha = hashlib.sha256(data).hexdigest()
            final = d / f"agent-{sha}.pyz"
            if not final.exists():
                await anyio.to_thread.run_sync(final.write_bytes, data)
            _ZIPAPP_CACHE[key] = (final, sha)
            return final, sha
        tmp = d / f"agent-build-{os.getpid()}-{secrets.token_hex(4)}.pyz"
        # Nodes with Python 3.8-3.10 run the older dependency set the zipapp also carries.
        compat = await anyio.to_thread.run_sync(ensure_compat_deps, paths.cache_dir())

        def build() -> str:  # compiled once per install and version, then from the cache
            return build_zipapp(tmp, compat_dir=compat, cache_dir=paths.cache_dir())

        sha = await anyio.to_thread.run_sync(build)
        final = d / f"agent-{sha}.pyz"
        tmp.replace(final)
        _ZIPAPP_CACHE[key] = (final, sha)
        return final, sha


@dataclass
class AgentSite:
    """One node's agent as the deployer sees it. ``port``/``socket``/``sha`` are filled in
    by ``start`` (from the agent's agent.json)."""

    node_dir: str  # the agent's --home on the node
    base: str  # where zipapps live on the node (e.g. ~/.skyd)
    rank: int
    cluster: str
    listen_host: str = "127.0.0.1"  # the agent's TCP listen address on the node
    port: int = 0
    socket: str | None = None
    sha: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def address(self) -> AgentAddress:
        sock = self.socket or posixpath.join(self.node_dir, "agent.sock")
        return AgentAddress(self.listen_host or "127.0.0.1", int(self.port), sock)


async def start(t: Transport, site: AgentSite, token: str, zipapp: tuple[Path, str]) -> dict[str, Any]:
    """Make this version's agent run on the node (started, kept, or upgraded in place).
    Returns agent.json plus ``state``: running | started | upgraded."""
    pyz_local, sha = zipapp
    base, nd = site.base, site.node_dir
    pyz = posixpath.join(base, f"agent-{sha}.pyz")
    q = _q
    res = await t.run(
        f"mkdir -p {q(nd)} && chmod 700 {q(base)} {q(nd)} && (test -f {q(pyz)} && echo have || true)",
        check=True,
        idempotent=True,
    )
    if "have" not in res.stdout:
        await t.put(pyz_local, pyz)
    # Fresh credentials for this start (the cluster secret itself never reaches the node):
    # staged, and put in place by ENSURE_AGENT only if it starts an agent.
    from skyd.nodeagent.credentials import agent_credentials

    creds = await anyio.to_thread.run_sync(agent_credentials, token)
    for name, data in creds.items():
        await t.write_file(posixpath.join(nd, agent_scripts.STAGED + name), data, mode=0o600)
    listen = f"{site.listen_host}:0"
    out = await t.run(
        [t.python, "-c", agent_scripts.ENSURE_AGENT, nd, pyz, sha, listen, str(site.rank), site.cluster,
         *creds],
        timeout=60,
    )
    if out.exit_status != 0:
        raise ResourcesUnavailableError(
            f"{t}: the node agent did not start (exit {out.exit_status}): "
            + out.stderr.strip()[-800:],
            hint=f"see {nd}/agent.log on the node",
        )
    info = dict(json.loads(out.stdout.strip().splitlines()[-1]))
    site.port = int(info["port"])
    site.socket = info.get("socket") or None
    site.sha = sha
    return info


async def process_states(t: Transport, sites: Sequence[AgentSite]) -> list[tuple[str, str]]:
    """(running|stopped|dead|terminated, running sha or "") per site, in one command."""
    res = await t.run([t.python, "-c", agent_scripts.STATUS, *[s.node_dir for s in sites]],
                      timeout=20, idempotent=True)  # fmt: skip
    lines = res.stdout.strip().splitlines()
    out: list[tuple[str, str]] = []
    for i in range(len(sites)):
        word, _, sha = (lines[i] if i < len(lines) else "dead").partition(" ")
        out.append((word, sha))
    return out


async def client_ssl(token: str) -> Any:
    """The daemon's TLS client context for the cluster of ``token``; built once per process
    (key generation and a file write) in a worker thread, never on the event loop."""
    from skyd.nodeagent import credentials

    ctx = credentials.cached_client_ssl(token)
    if ctx is None:
        ctx = await anyio.to_thread.run_sync(credentials.client_ssl, token)
    return ctx


async def healthy(t: Transport, site: AgentSite, token: str, timeout: float = 5.0) -> bool:
    """True when the agent answers Health through the transport's byte stream."""
    try:
        from skyd.nodeagent.client import AgentClient
    except ImportError:  # pragma: no cover - agent package missing
        return True
    try:
        with anyio.fail_after(timeout + 10):
            host, port = await t.agent_endpoint(site.address())
            async with AgentClient(host, port, ssl=await client_ssl(token)) as c:
                return await c.health(timeout=timeout)
    except Exception:  # noqa: BLE001 - any failure means unhealthy
        return False


async def node_state(t: Transport, site: AgentSite, token: str) -> tuple[str, str]:
    """(RUNNING|STOPPED|TERMINATED|UNKNOWN, running sha or ""). An agent gone without being
    stopped (crash, kill -9), or one that does not answer, is UNKNOWN; one stopped on
    purpose (stop, autostop) is STOPPED."""
    try:
        ((word, sha),) = await process_states(t, [site])
    except (SkydError, OSError):
        return UNKNOWN, ""  # unreachable
    if word == "terminated":
        return TERMINATED, ""
    if word == "stopped":
        return STOPPED, ""
    if word == "running" and await healthy(t, site, token):
        return RUNNING, sha
    return UNKNOWN, ""


async def request_exit(t: Transport, site: AgentSite, token: str, timeout: float = 15.0) -> bool:
    """Ask the agent to cancel its jobs and exit (Shutdown RPC). False if it did not answer."""
    try:
        from skyd.nodeagent.client import AgentClient

        with anyio.fail_after(timeout):
            host, port = await t.agent_endpoint(site.address())
            async with AgentClient(host, port, ssl=await client_ssl(token)) as c:
                await c.shutdown(exit=True)
        return True
    except Exception:  # noqa: BLE001 - the caller falls back to signals
        return False


async def shutdown(t: Transport, site: AgentSite, token: str) -> None:
    """Cancel jobs and exit via the agent, then make sure the process is gone (signals) and
    mark the node stopped on purpose."""
    await request_exit(t, site, token)
    await t.run([t.python, "-c", agent_scripts.STOP, site.node_dir], timeout=30, idempotent=True)


async def remove(t: Transport, site: AgentSite, token: str) -> None:
    """Stop the agent and everything it started, remove its node dir and the zipapps no
    remaining node dir uses."""
    await shutdown(t, site, token)
    await t.run([t.python, "-c", agent_scripts.TERMINATE, site.node_dir, site.base, site.sha],
                timeout=60, idempotent=True, check=True)  # fmt: skip


async def ensure(
    nodes: Sequence[tuple[Transport, AgentSite]], token: str, zipapp: tuple[Path, str],
    log: Any, *, cluster: str,
) -> None:
    """Start agents that are down and upgrade ones of another version (same node dir, so the
    job queue survives). Nodes stopped on purpose are left stopped (`start` starts them);
    healthy agents of this version cost one status round trip each."""
    states: list[tuple[str, str]] = [(UNKNOWN, "")] * len(nodes)

    async def probe(i: int, t: Transport, site: AgentSite) -> None:
        states[i] = await node_state(t, site, token)

    async with anyio.create_task_group() as tg:
        for i, (t, site) in enumerate(nodes):
            tg.start_soon(probe, i, t, site)
    if any(s == TERMINATED for s, _ in states):
        raise ClusterStateError(
            f"cluster {cluster!r}: a node's files are gone",
            hint=f"skyd down {cluster} and launch it again",
        )
    if any(s == STOPPED for s, _ in states):
        return
    sha = zipapp[1]
    todo = [n for n, (s, have) in zip(nodes, states, strict=True) if s != RUNNING or have != sha]

    async def one(t: Transport, site: AgentSite) -> None:
        info = await start(t, site, token, zipapp)
        log(f"Node {site.rank}: agent {info.get('state')} on port {site.port}")

    await gather([(one, t, s) for t, s in todo])


async def gather(calls: Sequence[tuple[Any, ...]]) -> None:
    """Run ``fn(*args)`` for each call concurrently; the first failure is raised as itself
    (not as an exception group)."""
    try:
        async with anyio.create_task_group() as tg:
            for fn, *args in calls:
                tg.start_soon(fn, *args)
    except BaseExceptionGroup as eg:
        raise first_error(eg) from None


def first_error(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


__all__ = [
    "RUNNING",
    "STOPPED",
    "TERMINATED",
    "UNKNOWN",
    "AgentSite",
    "agent_zipapp",
    "client_ssl",
    "ensure",
    "healthy",
    "node_state",
    "process_states",
    "remove",
    "request_exit",
    "shutdown",
    "start",
]
