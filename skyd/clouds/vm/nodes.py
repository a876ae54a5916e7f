"""VM nodes reached over SSH: skyd's SSH key, waiting for sshd on a new VM, and the node
agent deployed with skyd.transports.agent_deploy.

Nothing here is GCP-specific: any provider whose nodes are fresh VMs with an address and a
key in their metadata (AWS key pairs, Azure, OCI) needs the same steps after create. The
node handles use the ``ssh`` provider's layout (``NodeHandle.ssh`` + ``extra`` base/home/
listen_host/sha/agent_socket), so the ``SSHProvisioner`` this module hands out serves their
agent endpoints, file sync and agent repairs unchanged.
"""

from __future__ import annotations

import posixpath
import shlex
from pathlib import Path
from typing import Any

import anyio

from skyd import paths
from skyd import settings as knobs
from skyd.clouds.base import LogFn, NodeHandle
from skyd.clouds.ssh.provisioner import SSHProvisioner, agent_site, node_record
from skyd.errors import ResourcesUnavailableError, SkydError
from skyd.transports import agent_deploy, container
from skyd.transports.ssh import SSHConnectError, SSHTarget

KEY_NAME = "skyd-vm-ed25519"
SSH_WAIT_S = 300.0  # a new VM's sshd; the attempt's deadline bounds it anyway


def _key_paths() -> tuple[Path, Path]:
    d = paths.home() / "keys"
    return d / KEY_NAME, d / f"{KEY_NAME}.pub"


async def ssh_key() -> tuple[Path, str]:
    """(private key path, public key line) of skyd's VM key, made once (0600)."""
    from skyd.transports.ssh_hosts import ensure_key

    priv, _ = _key_paths()
    return priv, await anyio.to_thread.run_sync(ensure_key, priv)


def node_handle(rank: int, instance_id: str, internal: str, connect: str, *, num_nodes: int,
                cluster: str, user: str, port: int, key: Path, external: str | None) -> NodeHandle:
    """A node before its agent runs (home and base are filled in by `deploy`)."""
    return NodeHandle(
        rank=rank, instance_id=instance_id, internal_ip=internal, external_ip=external,
        ssh={"host": connect, "port": port, "user": user, "identity_file": str(key), "proxy_jump": None},
        extra={"listen_host": "127.0.0.1" if num_nodes == 1 else internal},
    )


READY_POLL_S = 5.0


async def wait_ready(t: Any, node: NodeHandle, marker: str, log: LogFn) -> None:
    """Poll until ``marker`` (a path relative to the SSH user's home, or absolute) exists on
    the node: first-boot setup (a driver installed by the machine's user data, then a reboot)
    is done. Connections dropped by the reboot are retried; the attempt's deadline bounds it."""
    said = False
    path = shlex.quote(marker) if marker.startswith("/") else f'"$HOME"/{shlex.quote(marker)}'
    while True:
        try:
            r = await t.run(f"test -e {path}", idempotent=True, timeout=30)
            if r.exit_status == 0:
                return
        except (SkydError, OSError):
            pass  # the reboot dropped the connection: the next run reconnects
        if not said:
            log(f"Node {node.rank} ({(node.ssh or {}).get('host')}): waiting for first-boot setup "
                f"({marker})")
            said = True
        await anyio.sleep(knobs.NODE_READY_POLL_S.get())


async def deploy(ssh: SSHProvisioner, node: NodeHandle, cluster: str, token: str,
                 zipapp: tuple[Path, str], log: LogFn, ready_marker: str | None = None,
                 container_req: Any = None) -> None:
    """Wait for sshd (and ``ready_marker``, a file first-boot setup writes when done), then
    start this build's agent on the node (kept if it already runs); inside the task's
    container for image_id docker:<img> (``container_req`` at launch,
    ``node.extra['container']`` after)."""
    assert node.ssh is not None
    t = ssh.transport(SSHTarget.from_dict(node.ssh))
    with anyio.move_on_after(SSH_WAIT_S):
        while True:
            try:
                await t.connection(attempts=1)
                break
            except SSHConnectError as e:
                if e.kind in ("auth", "hostkey"):
                    raise ResourcesUnavailableError(
                        f"node {node.rank} ({node.ssh['host']}): {e.message}", hint=e.hint,
                        scope="zone") from None
                await anyio.sleep(1.0)
    if ready_marker:
        await wait_ready(t, node, ready_marker, log)
    try:
        home = (await t.run("printf %s \"$HOME\"", check=True, idempotent=True, timeout=30)).stdout.strip()
        base = posixpath.join(home or ".", ".skyd")
        node.node_dir = posixpath.join(base, "nodes", f"{cluster}-{node.rank}")
        node.extra.update(home=home, base=base)
        site = agent_site(node, cluster)
        at = await container.prepare(t, node.extra, rank=node.rank, node_dir=node.node_dir, home=home,
                                     log=log, request=container_req)
        info = await agent_deploy.start(at, site, token, zipapp)
    except ResourcesUnavailableError:
        raise
    except (SkydError, OSError) as e:
        raise ResourcesUnavailableError(f"node {node.rank} ({node.ssh['host']}): {e}",
                                        scope="zone") from None
    node_record(node, site, info)
    log(f"Node {node.rank} ({node.ssh['host']}): agent {info.get('state')} on port {node.agent_port}")


def keep_containers(new: list[NodeHandle], old: dict[int, Any]) -> None:
    """Node handles rebuilt on `start` keep their task container (image_id docker:), so
    `deploy` starts it again and runs the agent inside."""
    for n in new:
        if old.get(n.rank):
            n.extra["container"] = old[n.rank]


async def forget_host_keys(addrs: list[tuple[str, int]]) -> None:
    """Drop skyd's recorded host keys for addresses that now belong to new VMs (cloud
    addresses are reused: the next VM on an address has a new key, which is no attack)."""
    from skyd.transports.ssh_hosts import forget_host_keys as forget

    names = {host if port == 22 else f"[{host}]:{port}" for host, port in addrs}
    if names:
        await anyio.to_thread.run_sync(forget, names)


async def shutdown_agents(ssh: SSHProvisioner, nodes: list[NodeHandle], cluster: str, token: str) -> None:
    """Best effort: cancel jobs and stop each agent before its VM stops."""
    async def one(n: NodeHandle) -> None:
        with anyio.move_on_after(20):
            try:
                t = ssh.transport(SSHTarget.from_dict(n.ssh or {}))
                await t.connection(attempts=1)
                await agent_deploy.shutdown(t, agent_site(n, cluster), token)
            except (SkydError, OSError):
                pass

    async with anyio.create_task_group() as tg:
        for n in nodes:
            tg.start_soon(one, n)


async def drop_transports(ssh: SSHProvisioner, nodes: list[NodeHandle]) -> None:
    """Close the SSH connections to nodes that are going away (or changing address)."""
    for n in nodes:
        if not n.ssh:
            continue
        key = SSHTarget.from_dict(n.ssh).key
        t = ssh._transports.pop(key, None)
        if t is not None:
            await t.close()
