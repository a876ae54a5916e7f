"""Registry login and pulls against a real registry (Debian's docker-registry with htpasswd
basic auth on 127.0.0.1) through real podman: a private image pulled with
SKYPILOT_DOCKER_* credentials (the password never on a command line nor in the container's
configuration), progress in the log, and one clear message for bad credentials, an unknown
image, a registry that is down, and an image of another architecture; nothing left running."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyd.errors import InvalidSpecError, ResourcesUnavailableError
from skyd.transports import container_runtime as crt
from skyd.transports.container import ContainerTransport
from skyd.transports.local import LocalTransport
from tests.fakes import containers as fc

pytestmark = pytest.mark.skipif(
    fc.missing() is not None or not fc.REGISTRY or not fc.HTPASSWD,
    reason=str(fc.missing() or "docker-registry / apache2-utils (htpasswd) are not installed"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[fc.Registry]:
    fc.python_image()
    reg = fc.Registry(tmp_path_factory.mktemp("registry")).start()
    try:
        reg.push(fc.PY_IMAGE, "team/py:1")
        yield reg
    finally:
        reg.stop()


def _spec(tmp_path: Path, image: str, name: str) -> crt.ContainerSpec:
    nd = str(tmp_path / "node")
    os.makedirs(nd, exist_ok=True)
    return crt.ContainerRequest(image=image).spec(cluster_tag=f"reg-{name}-{os.getpid()}", rank=0,
                                                  node_dir=nd, home=nd)


class CmdlineWatch:
    """Collects every process command line on the machine while it runs (a password that
    ever appears in argv would be seen)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in Path("/proc").iterdir():
                if p.name.isdigit():
                    try:
                        self.seen.add((p / "cmdline").read_bytes().decode(errors="replace"))
                    except OSError:
                        pass
            time.sleep(0.01)

    def __enter__(self) -> CmdlineWatch:
        self._t.start()
        return self

    def __exit__(self, *a: object) -> None:
        self._stop.set()
        self._t.join()


def _gone(spec: crt.ContainerSpec) -> bool:
    return fc.podman("container", "exists", spec.name, check=False).returncode != 0


@pytest.mark.anyio
async def test_private_image_pulled_with_login_password_never_on_a_command_line(
        registry: fc.Registry, tmp_path: Path) -> None:
    image = f"{registry.addr}/team/py:1"
    fc.podman("rmi", "-f", image, check=False)
    spec = _spec(tmp_path, image, "ok")
    creds = crt.RegistryLogin.from_envs({"SKYPILOT_DOCKER_USERNAME": registry.user,
                                         "SKYPILOT_DOCKER_PASSWORD": registry.password}, image)
    assert creds is not None and creds.server == registry.addr
    logs: list[str] = []
    t = LocalTransport(tmp_path / "node")
    try:
        with CmdlineWatch() as w:
            await crt.ensure(t, spec, logs.append, creds=creds, want="podman")
        assert not [c for c in w.seen if registry.password in c]
        text = "\n".join(logs)
        assert f"Logged in to {registry.addr}" in text
        assert f"pulling {image}" in text and ("Copying blob" in text or "Writing manifest" in text), text
        assert registry.password not in text
        insp = fc.podman("inspect", spec.name).stdout.decode()
        assert registry.password not in insp
        r = await ContainerTransport(t, spec).run("python3 -c 'print(6*7)'")
        assert r.stdout.strip() == "42"
        # the credentials live in the cluster's own 0700 dir, removed with the container
        assert (Path(spec.auth_dir) / "auth.json").exists()
        assert oct(Path(spec.auth_dir).stat().st_mode & 0o777) == "0o700"
    finally:
        await crt.remove(t, spec)
        fc.podman("rmi", "-f", image, check=False)
    assert _gone(spec) and not Path(spec.auth_dir).exists()


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "words"), [
    ("bad-password", "refused the credentials"),
    ("no-login", "refused the credentials"),
    ("unknown-image", "was not found"),
    ("registry-down", "cannot be reached"),
])
async def test_pull_failures_are_one_clear_message_and_leave_nothing(
        registry: fc.Registry, tmp_path: Path, case: str, words: str) -> None:
    image = f"{registry.addr}/team/py:1"
    creds: crt.RegistryLogin | None = crt.RegistryLogin(registry.addr, registry.user, registry.password)
    if case == "bad-password":
        creds = crt.RegistryLogin(registry.addr, registry.user, "wrong")
    elif case == "no-login":
        creds = None
    elif case == "unknown-image":
        image = f"{registry.addr}/team/nope:1"
    elif case == "registry-down":
        image = f"127.0.0.1:{fc.free_port()}/team/py:1"
        creds = None
    fc.podman("rmi", "-f", image, check=False)
    spec = _spec(tmp_path, image, case)
    t = LocalTransport(tmp_path / "node")
    with pytest.raises(ResourcesUnavailableError) as ei:
        await crt.ensure(t, spec, lambda _m: None, creds=creds, want="podman")
    e = ei.value
    assert words in e.message and e.field == "resources.image_id" and e.scope == "stop", (
        e.message, e.provider_message)
    assert "wrong" not in str(e.to_dict()) and registry.password not in str(e.to_dict())
    assert _gone(spec)


@pytest.mark.anyio
async def test_wrong_architecture_is_refused_before_anything_runs(tmp_path: Path) -> None:
    other = "localhost/skyd-test-arm:1"
    fc.podman("rmi", "-f", other, check=False)
    fc.podman("import", "--arch", "arm64", "--change", "ENV=PATH=/bin", str(_rootfs_tar(tmp_path)), other)
    spec = _spec(tmp_path, other, "arch")
    t = LocalTransport(tmp_path / "node")
    try:
        with pytest.raises(ResourcesUnavailableError) as ei:
            await crt.ensure(t, spec, lambda _m: None, want="podman")
        assert "built for arm64" in ei.value.message and "amd64" in ei.value.message
        assert _gone(spec)
    finally:
        fc.podman("rmi", "-f", other, check=False)


def _rootfs_tar(tmp_path: Path) -> Path:
    import tarfile

    root = tmp_path / "rootfs"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "hello").write_text("#!/bin/sh\necho hi\n")
    out = tmp_path / "rootfs.tar"
    with tarfile.open(out, "w") as tar:
        tar.add(str(root), arcname=".")
    return out


def test_registry_envs_and_image_references_are_checked() -> None:
    with pytest.raises(InvalidSpecError, match="SKYPILOT_DOCKER_PASSWORD"):
        crt.RegistryLogin.from_envs({"SKYPILOT_DOCKER_USERNAME": "u"}, "x/y")
    got = crt.RegistryLogin.from_envs({"SKYPILOT_DOCKER_USERNAME": "AWS", "SKYPILOT_DOCKER_PASSWORD": "p"},
                                      "123.dkr.ecr.us-east-1.amazonaws.com/repo:1")
    assert got is not None and got.server == "123.dkr.ecr.us-east-1.amazonaws.com"
    assert "password" not in repr(got)
    assert crt.registry_of("rocm/pytorch:latest") == "docker.io"
    assert crt.registry_of("nvcr.io/nvidia/pytorch:24.01-py3") == "nvcr.io"
    for bad in ("", " ", "a b", "x;rm -rf /", "-v/:/x", "name:"):
        with pytest.raises(InvalidSpecError):
            crt.check_image(bad)


def test_gpu_flags_per_vendor() -> None:
    assert crt.gpu_flags("docker", "nvidia") == ["--gpus", "all"]
    assert crt.gpu_flags("podman", "nvidia") == ["--device", "nvidia.com/gpu=all"]
    amd = crt.gpu_flags("docker", "amd")
    for flag in ("/dev/kfd", "/dev/dri", "video", "render", "seccomp=unconfined"):
        assert flag in amd
    assert amd[amd.index("--ipc") + 1] == "host"
    # the node's device groups by number (the image's /etc/group may lack `render`)
    amd = crt.gpu_flags("podman", "amd", ["44", "993", "44", "0"])
    assert [amd[i + 1] for i, a in enumerate(amd) if a == "--group-add"] == ["44", "993"]
    assert crt.gpu_flags("podman", None) == []


@pytest.fixture(scope="module")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[fc.Dockerd]:
    if not fc.DOCKERD or os.geteuid() != 0:
        pytest.skip("dockerd is not installed (apt-get install docker.io) or not root")
    d = fc.Dockerd(Path(tempfile.mkdtemp(prefix="skyd-dockerd-", dir="/tmp"))).start()
    try:
        yield d
    finally:
        d.stop()


@pytest.mark.anyio
async def test_docker_runtime_private_pull_exec_and_remove(
        registry: fc.Registry, dockerd: fc.Dockerd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The docker path: a daemon that answers is chosen; login with --password-stdin into
    the cluster's own --config dir; pull, run, exec, rm."""
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    image = f"{registry.addr}/team/py:1"
    spec = _spec(tmp_path, image, "docker")
    creds = crt.RegistryLogin(registry.addr, registry.user, registry.password)
    t = LocalTransport(tmp_path / "node")
    logs: list[str] = []
    try:
        with CmdlineWatch() as w:
            await crt.ensure(t, spec, logs.append, creds=creds)  # no `want`: found on the node
        assert spec.kind == "docker", spec.runtime
        assert not [c for c in w.seen if registry.password in c]
        assert (Path(spec.auth_dir) / "config.json").exists()  # not the user's ~/.docker
        r = await ContainerTransport(t, spec).run("python3 -c 'print(6*7)'; echo $HOME")
        assert r.stdout.split() == ["42", str(tmp_path / "node")], r
        insp = subprocess.run(["docker", "inspect", spec.name], capture_output=True, text=True).stdout
        assert registry.password not in insp and '"NetworkMode": "host"' in insp
    finally:
        await crt.remove(t, spec)
    gone = subprocess.run(["docker", "inspect", spec.name], capture_output=True)
    assert gone.returncode != 0


@pytest.mark.anyio
async def test_a_node_without_a_runtime_gets_podman_installed_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No docker or podman on the node's PATH: the node's package manager installs podman
    (here a stand-in apt-get that links the real one into the node's PATH: a test may not
    run the real one on a shared machine), the launch log says so, and the container runs."""
    fc.python_image()
    farm = tmp_path / "bin"
    farm.mkdir()
    skip = {"podman", "docker", "apt-get", "dnf", "yum", "dockerd"}
    for d in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        if os.path.isdir(d):
            for name in os.listdir(d):
                if name not in skip and not (farm / name).exists():
                    (farm / name).symlink_to(os.path.join(d, name))
    apt = farm / "apt-get"
    apt.write_text(f"#!/bin/sh\necho \"apt-get $*\" >> {tmp_path}/apt.log\n"
                   f"ln -s {fc.PODMAN} {farm}/podman\n")
    apt.chmod(0o755)
    monkeypatch.setenv("PATH", str(farm))
    spec = _spec(tmp_path, fc.PY_IMAGE, "install")
    t = LocalTransport(tmp_path / "node")
    logs: list[str] = []
    try:
        await crt.ensure(t, spec, logs.append)
        assert "install -y -q podman runc" in (tmp_path / "apt.log").read_text()
        text = "\n".join(logs)
        assert "no docker or podman found: installing podman" in text and "podman installed" in text, text
        r = await ContainerTransport(t, spec).run("python3 -c 'print(1+1)'")
        assert r.stdout.strip() == "2"
    finally:
        await crt.remove(t, spec)
    assert _gone(spec)
