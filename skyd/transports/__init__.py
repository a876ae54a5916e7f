"""How skyd reaches a node: run commands, copy files, deploy the agent — local, SSH,
Kubernetes exec, containers, sandboxes (docs/transports.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyd import face

_FACE = {
    "AgentSite": "agent_deploy",
    "ContainerRequest": "container_runtime",
    "ContainerTransport": "container",
    "KubeConn": "kube",
    "KubeExecError": "kube",
    "KubeTransport": "kube",
    "LocalTransport": "local",
    "MOUNTS": "fuse",
    "NodeShell": "base",
    "RegistryLogin": "container_runtime",
    "SSHConnectError": "ssh",
    "SSHTarget": "ssh",
    "SSHTransport": "ssh",
    "agent_zipapp": "agent_deploy",
    "client_ssl": "agent_deploy",
    "first_error": "agent_deploy",
    "fuse_mounts_under": "fuse",
    "gather": "agent_deploy",
    "image_of": "container_runtime",
    "known_hosts_path": "ssh_hosts",
    "load_excludes": "sync",
    "sync_local_dir": "sync",
    "sync_to_remote": "sync",
    "unmount_node": "fuse",
    "unmount_under": "fuse",
}
__all__ = [
    "AgentSite", "ContainerRequest", "ContainerTransport", "KubeConn", "KubeExecError",
    "KubeTransport", "LocalTransport", "MOUNTS", "NodeShell", "RegistryLogin",
    "SSHConnectError", "SSHTarget", "SSHTransport", "agent_zipapp", "client_ssl",
    "first_error", "fuse_mounts_under", "gather", "image_of", "known_hosts_path",
    "load_excludes", "sync_local_dir", "sync_to_remote", "unmount_node", "unmount_under",
    "agent_deploy", "agent_scripts", "container", "container_runtime", "sandbox_ns",
]
__getattr__ = face.lazy(__name__, _FACE)

if TYPE_CHECKING:
    from skyd.transports.agent_deploy import (
        AgentSite,
        agent_zipapp,
        client_ssl,
        first_error,
        gather,
    )
    from skyd.transports.base import NodeShell
    from skyd.transports.container import ContainerTransport
    from skyd.transports.container_runtime import ContainerRequest, RegistryLogin, image_of
    from skyd.transports.fuse import MOUNTS, fuse_mounts_under, unmount_node, unmount_under
    from skyd.transports.kube import KubeConn, KubeExecError, KubeTransport
    from skyd.transports.local import LocalTransport
    from skyd.transports.ssh import SSHConnectError, SSHTarget, SSHTransport
    from skyd.transports.ssh_hosts import known_hosts_path
    from skyd.transports.sync import load_excludes, sync_local_dir, sync_to_remote
