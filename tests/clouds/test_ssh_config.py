"""`ssh CLUSTER` through the SSH config skyd maintains: the OpenSSH client against a real
sshd (an SSH node pool) and through the kube exec path (a ProxyCommand running `sshd -i` in
the pod); the Include line added to ~/.ssh/config once; entries gone at down. HOME is a temp
dir: the real ~/.ssh/config is never touched. `status --ip/--endpoints` on both."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyd import paths
from tests.fakes.sshd import real_sshd, unavailable_reason
from tests.support.ssh_e2e import cli, daemon

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="the OpenSSH client is not installed")


@pytest.fixture
def temp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "userhome"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host mine\n  HostName 127.0.0.9\n")
    monkeypatch.setenv("SKYD_CACHE_DIR", str(paths.cache_dir()))  # shared downloads stay shared
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SKYD_SSH_CONFIG", "on")
    yield home


def _ssh(home: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    # OpenSSH finds ~/.ssh/config through the passwd entry, not $HOME: name the test's file.
    return subprocess.run(["ssh", "-F", str(home / ".ssh" / "config"), "-o", "BatchMode=yes", *args],
                          capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


@needs_ssh
@pytest.mark.anyio
@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
async def test_ssh_cluster_on_an_ssh_pool(skyd_home: Path, temp_home: Path, tmp_path: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="skyd-sshd-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    try:
        async with real_sshd(work) as s:
            cfg = skyd_home.parent / "config"
            cfg.mkdir(parents=True, exist_ok=True)
            (cfg / "ssh_node_pools.yaml").write_text(
                f"real:\n  user: {s.user}\n  identity_file: {s.key}\n  hosts:\n"
                f"    - ip: {s.host}\n      port: {s.port}\n")
            y = tmp_path / "t.yaml"
            y.write_text("resources:\n  infra: ssh/real\n  ports: [8081]\nrun: echo up\n")
            async with daemon():
                r = await cli("launch", "-y", "-c", "sc", str(y))
                assert r.returncode == 0, r
                assert "to " + str(temp_home / ".ssh" / "config") in r.stdout + r.stderr  # said once
                text = (temp_home / ".ssh" / "config").read_text()
                include = f"Include {skyd_home / 'ssh-config' / '*'}"
                assert text.splitlines().count(include) == 1 and text.index(include) < text.index("Host mine")
                got = _ssh(temp_home, "sc", "echo via-openssh $(id -un)")
                assert got.returncode == 0, got.stderr
                assert got.stdout.strip() == f"via-openssh {s.user}"
                # status --ip / --endpoints on an SSH pool
                r = await cli("status", "--ip", "sc")
                assert r.stdout.strip() == s.host, r
                r = await cli("status", "--endpoints", "sc", "-o", "json")
                assert r.json()["endpoints"] == {"8081": f"{s.host}:8081"}
                r = await cli("down", "-y", "sc")
                assert r.returncode == 0, r
                assert not (skyd_home / "ssh-config" / "sc").exists()
                got = _ssh(temp_home, "sc", "true", timeout=20)
                assert got.returncode != 0
                # Launched again: the entry is back, the line is not added (or said) twice.
                r = await cli("launch", "-y", "-c", "sc", str(y))
                assert r.returncode == 0, r
                assert "Include" not in r.stdout + r.stderr
                assert (temp_home / ".ssh" / "config").read_text().count(include) == 1
                assert _ssh(temp_home, "sc", "echo again").stdout.strip() == "again"
                r = await cli("down", "-y", "sc")
                assert r.returncode == 0, r
    finally:
        shutil.rmtree(work, ignore_errors=True)


@needs_ssh
@pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="sshd (openssh-server) is not installed")
def test_ssh_cluster_on_kubernetes_through_exec(tmp_path_factory: pytest.TempPathFactory,
                                               temp_home: Path, tmp_path: Path) -> None:
    from tests.fakes.kubeapi import FakeKube, gpu_node
    from tests.support.gcp import guarded_module_env
    from tests.support.pipeline import write

    kube = FakeKube(tmp_path_factory.mktemp("kube-ssh")).start()
    kube.add_node(gpu_node("cpu-a", {}, cpu="16", memory="64Gi"))
    try:
        base = tmp_path_factory.mktemp("k8s-ssh")
        cfg = kube.kubeconfig(base / "kubeconfig", {"lab": "skyd"})
        env_vars = {"KUBECONFIG": str(cfg), "SKYD_K8S_POLL_S": "0.1", "SKYD_PROVISION_TIMEOUT_S": "90",
                    "HOME": str(temp_home), "SKYD_SSH_CONFIG": "on"}
        with guarded_module_env(tmp_path_factory, base / "netguard.log", env_vars) as e:
            y = write(tmp_path / "k.yaml", "resources:\n  infra: k8s/lab\n  cpus: 1\n  ports: [8082]\n"
                                           "num_nodes: 2\nrun: echo pod-up\n")
            r = e.ok("launch", "-y", "-c", "ks", str(y), timeout=180)
            assert "Include" in r.stdout + r.stderr
            entry = (e.home / "ssh-config" / "ks").read_text()
            assert "Host ks\n" in entry and "Host ks-worker1\n" in entry and "ProxyCommand" in entry
            for host in ("ks", "ks-worker1"):
                calls = kube.exec_calls
                got = _ssh(temp_home, host, "echo in-pod-$((6*7))", timeout=90)
                assert got.returncode == 0, got.stderr
                assert got.stdout.strip() == "in-pod-42", got.stdout
                assert kube.exec_calls > calls  # sshd -i ran in the pod, through exec
            # sshd's host key was made in each pod's skyd directory
            assert len(list(kube.root.rglob("sshd/host_ed25519"))) == 2
            ip = e.ok("status", "--ip", "ks").stdout.strip()
            assert ip and e.json("status", "--endpoint", "8082", "ks")["endpoint"] == f"{ip}:8082"
            e.ok("down", "-y", "ks", timeout=120)
            assert not (e.home / "ssh-config" / "ks").exists()
    finally:
        left = kube.live()
        kube.stop()
    assert not left, left


def test_entries_per_infra(skyd_home: Path) -> None:
    from skyd.clouds.base import ClusterHandle, NodeHandle
    from skyd.pipeline import sshconfig

    def handle(cloud: str, nodes: list[NodeHandle]) -> ClusterHandle:
        return ClusterHandle("c1", cloud, None, None, None, False, {}, len(nodes), 0.0, nodes, "t")

    vm = handle("aws", [NodeHandle(r, f"i-{r}", f"10.0.0.{r}", ssh={
        "host": f"127.0.0.{10 + r}", "port": 2200 + r, "user": "ubuntu",
        "identity_file": "/k/id", "proxy_jump": "bastion" if r else None}) for r in range(2)])
    text = sshconfig.render(vm)
    assert text is not None
    assert "Host c1\n  HostName 127.0.0.10\n  Port 2200\n  User ubuntu\n" in text
    assert "Host c1-worker1\n  HostName 127.0.0.11\n  Port 2201\n" in text and "ProxyJump bastion" in text
    assert "StrictHostKeyChecking yes" in text and "IdentitiesOnly yes" in text
    pod = handle("kubernetes", [NodeHandle(0, "c1-head", "10.1.0.5", extra={
        "context": "ctx", "namespace": "ns", "home": "/root", "base": "/root/.skyd"})])
    text = sshconfig.render(pod)
    assert text is not None and "User root" in text and "ProxyCommand " in text
    assert "ssh-proxy kubernetes --context ctx --namespace ns --pod c1-head" in text
    local = handle("local", [NodeHandle(0, "c1-0", "127.0.0.3", node_dir="/x")])
    assert sshconfig.render(local) is None
    # written, then removed; a name that is not one plain file name is never written
    assert sshconfig.write_sync(vm) and (skyd_home / "ssh-config" / "c1").exists()
    assert (skyd_home / "ssh-config" / "c1").stat().st_mode & 0o777 == 0o600
    sshconfig.remove_sync("c1")
    assert not (skyd_home / "ssh-config" / "c1").exists()
    vm.cluster_name = "../evil"
    assert not sshconfig.write_sync(vm) and not (skyd_home / "evil").exists()
