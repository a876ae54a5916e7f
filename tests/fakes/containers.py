"""Container test infrastructure: real podman (with runc), images built on this machine
(no internet), and Debian's docker-registry with htpasswd basic auth on 127.0.0.1.

- ``python_image()``: ``localhost/skyd-test-py:1``, a rootfs holding this machine's
  /usr/bin/python3 with its stdlib and shared libraries, bash, and busybox's applets
  (``podman import`` of a tar). Built once, kept in podman's store.
- ``busybox_image()``: ``localhost/skyd-test-busybox:1`` (no python: the error path).
- ``Registry``: ``docker-registry serve`` on 127.0.0.1:<free port>, filesystem storage in a
  temp dir, one htpasswd user; ``push()`` copies a local image into it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

PODMAN = shutil.which("podman")
RUNC = next((p for p in ("/usr/sbin/runc", "/usr/bin/runc") if os.path.exists(p)), None)
REGISTRY = shutil.which("docker-registry")
HTPASSWD = shutil.which("htpasswd")
BUSYBOX = next((p for p in ("/bin/busybox", "/usr/bin/busybox") if os.path.exists(p)), None)
PY_IMAGE = "localhost/skyd-test-py:1"
BB_IMAGE = "localhost/skyd-test-busybox:1"


def missing() -> str | None:
    """Why the container tests cannot run here (None: they can)."""
    if not PODMAN or not RUNC:
        return "podman and runc are not installed (apt-get install podman runc)"
    if not BUSYBOX:
        return "busybox is not installed (apt-get install busybox-static)"
    return None


def podman(*args: str, check: bool = True, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    assert PODMAN and RUNC
    return subprocess.run([PODMAN, "--runtime", RUNC, *args], capture_output=True, check=check,
                          input=input, timeout=600)


def image_exists(ref: str) -> bool:
    return podman("image", "exists", ref, check=False).returncode == 0


def _ldd(path: str) -> set[str]:
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    libs = set()
    for line in out.splitlines():
        parts = line.split("=>")
        cand = (parts[1] if len(parts) > 1 else parts[0]).strip().split(" ")[0]
        if cand.startswith("/"):
            libs.add(cand)
    return libs


def _busybox_root(root: Path) -> None:
    assert BUSYBOX
    (root / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True).stdout.split()
    for a in applets:
        if a in ("busybox", "bash"):
            continue
        dst = root / "bin" / a
        if not dst.exists():
            dst.symlink_to("busybox")
    for d in ("tmp", "root", "etc", "proc", "sys", "dev", "usr"):
        (root / d).mkdir(exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\nvideo:x:44:\nrender:x:105:\n")


def _import(root: Path, ref: str) -> None:
    with tempfile.NamedTemporaryFile(suffix=".tar") as tf:
        with tarfile.open(tf.name, "w") as tar:
            tar.add(str(root), arcname=".")
        podman("import", "--change", "ENV=PATH=/usr/local/bin:/usr/bin:/bin", tf.name, ref)


def busybox_image() -> str:
    if not image_exists(BB_IMAGE):
        with tempfile.TemporaryDirectory() as d:
            _busybox_root(Path(d))
            _import(Path(d), BB_IMAGE)
    return BB_IMAGE


def python_image() -> str:
    """python3 (this machine's), its stdlib and libs, bash, busybox applets."""
    if image_exists(PY_IMAGE):
        return PY_IMAGE
    py = os.path.realpath("/usr/bin/python3")
    stdlib = Path(f"/usr/lib/python3.{py.rsplit('3.', 1)[-1]}")
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        _busybox_root(root)
        (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(py, root / "usr" / "bin" / "python3")
        bash = shutil.which("bash") or "/bin/bash"
        shutil.copy2(bash, root / "usr" / "bin" / "bash")
        libs = _ldd(py) | _ldd(bash)
        shutil.copytree(stdlib, root / stdlib.relative_to("/"), symlinks=True,
                        ignore=shutil.ignore_patterns("test", "idlelib", "tkinter", "ensurepip",
                                                      "lib2to3", "site-packages", "dist-packages"))
        for so in (stdlib / "lib-dynload").glob("*.so"):
            libs |= _ldd(str(so))
        for lib in libs:
            real = Path(os.path.realpath(lib))
            for p in {Path(lib), real}:
                dst = root / p.relative_to("/")
                dst.parent.mkdir(parents=True, exist_ok=True)
                if not dst.exists():
                    shutil.copy2(real, dst)
        (root / "lib64").mkdir(exist_ok=True)
        _import(root, PY_IMAGE)
    return PY_IMAGE


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Registry:
    """docker-registry on 127.0.0.1 with basic auth (htpasswd, bcrypt)."""

    def __init__(self, workdir: Path, user: str = "skyduser", password: str | None = None) -> None:
        self.dir = workdir
        # A password of its own: tests look for it on every process's command line, and
        # another registry's set-up (htpasswd -b) may be running on another worker.
        self.user, self.password = user, password or f"s3cret-{secrets.token_hex(6)}"
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Registry:
        assert REGISTRY and HTPASSWD
        self.dir.mkdir(parents=True, exist_ok=True)
        htp = self.dir / "htpasswd"
        subprocess.run([HTPASSWD, "-Bbc", str(htp), self.user, self.password], check=True,
                       capture_output=True)
        conf = self.dir / "config.yml"
        conf.write_text(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {self.dir / 'data'}\n"
            f"http:\n  addr: {self.addr}\n"
            f"auth:\n  htpasswd:\n    realm: skyd-test\n    path: {htp}\n")
        self.proc = subprocess.Popen([REGISTRY, "serve", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=open(self.dir / "registry.log", "wb"))  # noqa: SIM115
        end = time.time() + 20
        while time.time() < end:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("docker-registry did not start: " + (self.dir / "registry.log").read_text())

    def push(self, local_ref: str, name: str) -> str:
        """Copy a local image into the registry as ``<addr>/<name>``; returns that ref."""
        ref = f"{self.addr}/{name}"
        podman("tag", local_ref, ref)
        authf = self.dir / "push-auth.json"
        authf.write_text("{}")
        podman("login", "--authfile", str(authf), "--tls-verify=false", "--username", self.user,
               "--password-stdin", self.addr, input=self.password.encode())
        podman("push", "--authfile", str(authf), "--tls-verify=false", ref)
        podman("rmi", ref, check=False)  # only the registry has it now
        return ref

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def bound_under(root: Path) -> list[str]:
    """Names of containers with a bind mount from under ``root`` (this test's own: runs of
    other checkouts on the same machine share podman's store)."""
    if not PODMAN or not RUNC:
        return []
    ids = podman("ps", "-aq", check=False).stdout.decode().split()
    prefix = str(root).rstrip("/") + "/"
    out = []
    for cid in ids:
        got = podman("inspect", "--format", "{{.Name}} {{range .Mounts}}{{.Source}} {{end}}", cid,
                     check=False).stdout.decode().split()
        if got and any(s.startswith(prefix) for s in got[1:]):
            out.append(got[0])
    return out


def remove_bound_under(root: Path) -> int:
    """Remove containers with a bind mount from under ``root`` (a fake VM going away takes
    its containers with it, as a deleted VM does; a test's safety net)."""
    names = bound_under(root)
    for n in names:
        podman("rm", "-f", n, check=False)
    return len(names)


DOCKERD = shutil.which("dockerd")


class Dockerd:
    """A private dockerd (its own socket, data root and exec root under a temp dir; no
    iptables, no bridge: host networking only), so nothing else on the machine sees it."""

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.sock = workdir / "docker.sock"
        self.host = f"unix://{self.sock}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Dockerd:
        assert DOCKERD
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [DOCKERD, "-H", self.host, "--data-root", str(self.dir / "data"), "--exec-root",
             str(self.dir / "exec"), "--pidfile", str(self.dir / "dockerd.pid"), "--iptables=false",
             "--ip6tables=false", "--bridge=none", "--storage-driver=vfs"],
            stdout=subprocess.DEVNULL, stderr=open(self.dir / "dockerd.log", "wb"))  # noqa: SIM115
        end = time.time() + 60
        while time.time() < end:
            r = subprocess.run(["docker", "-H", self.host, "info"], capture_output=True)
            if r.returncode == 0:
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("dockerd did not start: " + (self.dir / "dockerd.log").read_text()[-2000:])

    def stop(self) -> None:
        if self.proc is not None:
            subprocess.run(["docker", "-H", self.host, "rm", "-f", *subprocess.run(
                ["docker", "-H", self.host, "ps", "-aq"], capture_output=True, text=True).stdout.split()],
                capture_output=True)
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
