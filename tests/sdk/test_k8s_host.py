"""Kubernetes as the daemon's host: `skyd daemon deploy k8s://CONTEXT/NAMESPACE` against the
fake API server (bodies checked against kubernetes_asyncio's models), whose StatefulSet
controller runs the pod's container command as a local process with its volume as a
directory; the real CLI then reaches that daemon only through pod exec (`dial-stdio`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.kubeapi import FakeKube, gpu_node
from tests.support import forkserver
from tests.support.daemon import SKYD_BIN, guarded_pythonpath

NS = "skyd-ns"
URL = f"k8s://lab/{NS}"


@dataclass
class Kube:
    fake: FakeKube
    env: dict[str, str]  # the client's environment (its own SKYD_HOME, the kubeconfig)
    wrapper: Path  # the "executable" deploy copies: this checkout's skyd

    @property
    def volume(self) -> Path:
        return self.fake.root / "volumes" / NS / "skyd-home"

    def cli(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        return forkserver.run([str(SKYD_BIN), *args], {**self.env, **env}, timeout=timeout)

    def ok(self, *args: str, **kw: str) -> subprocess.CompletedProcess[str]:
        r = self.cli(*args, **kw)  # type: ignore[arg-type]
        assert r.returncode == 0, f"skyd {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}\n{self.pod_log()}"
        return r

    def pod_log(self) -> str:
        out = []
        for p in (self.volume / "logs" / "daemon.log", *self.fake.main_logs.values()):
            if p.exists():
                out.append(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def posts(self) -> int:
        return sum(n for k, n in self.fake.calls.items()
                   if k.split()[0] in ("POST", "PUT", "PATCH", "DELETE") and "/exec" not in k)

    def pod_uid(self) -> str:
        return str(self.fake.pods[(NS, "skyd-0")]["metadata"]["uid"])


def _sha(p: Path) -> str:
    import hashlib

    return hashlib.sha256(p.read_bytes()).hexdigest()[:16]


def _wrapper(d: Path, note: str = "") -> Path:
    w = d / "skyd-image-bin"
    w.write_text(f"#!/bin/sh\n# {note}\nexport PYTHONPATH={guarded_pythonpath()}\n"
                 f"exec {sys.executable} -m skyd.cli.main \"$@\"\n")
    w.chmod(0o755)
    return w


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    base = tmp_path_factory.mktemp("k8shost")
    fake = FakeKube(base / "kube").start()
    fake.add_node(gpu_node("node-a", {}, cpu="16", memory="64Gi"))
    # What the image would carry: the node agent's dependency cache and the network guard.
    fake.image_env = {k: os.environ[k] for k in ("SKYD_CACHE_DIR", "SKYD_NETGUARD_LOG",
                                                 "NO_GCE_CHECK") if k in os.environ}
    cfg = fake.kubeconfig(base / "kubeconfig", {"lab": NS, "other": "default"})
    env = {**os.environ, "SKYD_HOME": str(base / "client"), "SKYD_CONFIG_DIR": str(base / "cfg"),
           "KUBECONFIG": str(cfg), "PYTHONPATH": guarded_pythonpath()}
    for k in ("SKYD_SOCKET", "SKYD_HOST"):
        env.pop(k, None)
    k = Kube(fake, env, _wrapper(base))
    try:
        yield k
    finally:
        fake.stop()
        assert fake.rejected == [], fake.rejected


def test_deploy_makes_the_statefulset_and_its_volume(kube: Kube) -> None:
    r = kube.ok("daemon", "deploy", URL, "--binary", str(kube.wrapper), timeout=300)
    assert r.stdout.strip() == f"export SKYD_HOST={URL}"
    sts = kube.fake.statefulsets[(NS, "skyd")]["spec"]
    assert sts["replicas"] == 1
    pod = sts["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == "python:3.11-slim"
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["SKYD_HOME"] == "/var/lib/skyd" and env["SKYD_NO_AUTOSTART"] == "1"
    assert {"name": "home", "mountPath": "/var/lib/skyd"} in c["volumeMounts"]
    assert {"name": "home", "persistentVolumeClaim": {"claimName": "skyd-home"}} in pod["volumes"]
    assert pod["serviceAccountName"] == "skyd" and (NS, "skyd") in kube.fake.serviceaccounts
    pvc = kube.fake.pvcs[(NS, "skyd-home")]["spec"]
    assert pvc["accessModes"] == ["ReadWriteOnce"] and pvc["resources"]["requests"]["storage"] == "10Gi"
    installed = kube.volume / "bin" / f"skyd-{_sha(kube.wrapper)}"
    assert installed.read_bytes() == kube.wrapper.read_bytes()
    assert oct(installed.stat().st_mode & 0o777) == "0o700"
    assert "created statefulset skyd" in r.stderr and "daemon runs in pod skyd-0" in r.stderr
    # Again: nothing is created, replaced or sent; the same pod keeps running.
    before, uid = kube.posts(), kube.pod_uid()
    r = kube.ok("daemon", "deploy", URL, "--binary", str(kube.wrapper))
    assert "up to date" in r.stderr and "created" not in r.stderr and "copied" not in r.stderr
    assert kube.posts() == before and kube.pod_uid() == uid


def test_verbs_reach_the_pod_daemon_through_exec(kube: Kube, tmp_path: Path) -> None:
    if (NS, "skyd") not in kube.fake.statefulsets:
        kube.ok("daemon", "deploy", URL, "--binary", str(kube.wrapper), timeout=300)
    execs = kube.fake.exec_calls
    r = kube.ok("status", "-o", "json", SKYD_HOST=URL)
    json.loads(r.stdout)
    assert kube.fake.exec_calls > execs  # through the API server's exec, nothing else
    assert (kube.volume / "state.db").exists()
    assert not (Path(kube.env["SKYD_HOME"]) / "state.db").exists()
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "note.txt").write_text("from-the-laptop\n")
    task = tmp_path / "t.yaml"
    task.write_text("workdir: code\nresources:\n  infra: local\n"
                    "run: echo hello-from-the-pod-daemon; cat note.txt\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = kube.ok("launch", "-y", "-c", "kk", str(task), SKYD_HOST=URL, TMPDIR=str(tmp), timeout=300)
    assert "hello-from-the-pod-daemon" in r.stdout and "from-the-laptop" in r.stdout, r.stdout
    assert list(tmp.iterdir()) == []  # the CLI's private relay socket went away with it
    assert (kube.volume / "local").is_dir()  # the pod daemon's sandboxes, on its volume
    # current context, its namespace: the same daemon
    r = kube.ok("status", "-o", "json", SKYD_HOST="k8s://")
    assert "kk" in r.stdout
    # named contexts and --host
    kube.ok("context", "add", "pod", "k8s:///" + NS)
    kube.ok("context", "use", "pod")
    assert "kk" in kube.ok("status").stdout
    kube.ok("context", "use", "local")
    assert "kk" in kube.ok("--host", URL, "status").stdout
    kube.ok("down", "-y", "kk", SKYD_HOST=URL, timeout=180)
    kube.ok("context", "rm", "pod")


def test_upgrade_rolls_the_pod_and_keeps_state(kube: Kube, tmp_path: Path) -> None:
    if (NS, "skyd") not in kube.fake.statefulsets:
        kube.ok("daemon", "deploy", URL, "--binary", str(kube.wrapper), timeout=300)
    task = tmp_path / "t.yaml"
    task.write_text("resources:\n  infra: local\nrun: echo v1\n")
    kube.ok("launch", "-y", "-c", "ku", str(task), SKYD_HOST=URL, timeout=300)
    other = _wrapper(tmp_path, "another build")
    r = kube.cli("daemon", "deploy", URL, "--binary", str(other))
    assert r.returncode != 0 and "--upgrade" in r.stderr and "Traceback" not in r.stderr
    uid = kube.pod_uid()
    r = kube.ok("daemon", "deploy", URL, "--binary", str(other), "--upgrade", timeout=300)
    assert "rolled statefulset skyd" in r.stderr
    assert kube.pod_uid() != uid
    assert [p.name for p in (kube.volume / "bin").iterdir()] == [f"skyd-{_sha(other)}"]
    row = [c for c in json.loads(kube.ok("status", "-o", "json", SKYD_HOST=URL).stdout)
           if c.get("name") == "ku"]
    assert row, "the cluster launched before the upgrade is still known"
    kube.ok("down", "-y", "ku", SKYD_HOST=URL, timeout=180)


@pytest.mark.anyio
async def test_async_sdk_through_the_pod_relay(kube: Kube) -> None:
    if (NS, "skyd") not in kube.fake.statefulsets:
        kube.ok("daemon", "deploy", URL, "--binary", str(kube.wrapper), timeout=300)
    from skyd.sdk.aio import AsyncClient

    keys = ("SKYD_HOME", "SKYD_CONFIG_DIR", "KUBECONFIG")
    saved = {k: os.environ.get(k) for k in (*keys, "SKYD_HOST")}
    os.environ.update({k: kube.env[k] for k in keys}, SKYD_HOST=URL)
    try:
        c = AsyncClient()
        relay_dir = Path(c.socket_path).parent
        assert oct(relay_dir.stat().st_mode & 0o777) == "0o700"
        health = await c.get("/v1/health")
        assert Path(health["home"]).resolve() == kube.volume.resolve()
        await c.close()
        assert not relay_dir.exists()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_bad_k8s_hosts_are_one_clear_error(kube: Kube) -> None:
    for bad, says in (("k8s://lab/Bad_NS", "namespace"), ("k8s://nosuch/x", "lab"),
                      ("k8s://lab/ns?zone=1", "name"), ("k8s://a/b/c", "%2F")):
        r = kube.cli("status", SKYD_HOST=bad)
        assert r.returncode == 2, (bad, r.stderr)
        assert says in r.stderr and "Traceback" not in r.stderr, (bad, r.stderr)
    r = kube.cli("daemon", "deploy", URL, "--remote-home", "/x")
    assert r.returncode == 2 and "--remote-home" in r.stderr
    r = kube.cli("daemon", "deploy", "ssh://h", "--image", "x")
    assert r.returncode == 2 and "--image" in r.stderr
    # nothing deployed in that namespace: one message naming how to deploy, exit 7
    t0 = time.monotonic()
    r = kube.cli("status", SKYD_HOST="k8s://other/empty")
    assert r.returncode == 7, r.stderr
    assert "skyd daemon deploy k8s://other/empty" in r.stderr and "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 60


def test_exec_plugin_kubeconfigs_and_broken_ones(kube: Kube, tmp_path: Path) -> None:
    """A context whose user authenticates with an exec plugin (EKS, GKE) goes through the
    Kubernetes client library's loader; a kubeconfig that is not one is one clear error."""
    if (NS, "skyd") not in kube.fake.statefulsets:
        kube.ok("daemon", "deploy", URL, "--binary", str(kube.wrapper), timeout=300)
    import yaml

    from tests.fakes.kubeapi import TOKEN

    plugin = tmp_path / "token-plugin"
    plugin.write_text("#!/bin/sh\necho '{\"apiVersion\": \"client.authentication.k8s.io/v1beta1\", "
                      f"\"kind\": \"ExecCredential\", \"status\": {{\"token\": \"{TOKEN}\"}}}}'\n")
    plugin.chmod(0o755)
    cfg = yaml.safe_load(Path(kube.env["KUBECONFIG"]).read_text())
    cfg["users"] = [{"name": "tester", "user": {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin),
        "interactiveMode": "Never"}}}]
    kc = tmp_path / "kubeconfig-plugin"
    kc.write_text(yaml.safe_dump(cfg))
    r = kube.ok("status", "-o", "json", SKYD_HOST=URL, KUBECONFIG=str(kc))
    json.loads(r.stdout)
    bad = tmp_path / "kubeconfig-bad"
    bad.write_text("- just\n- a list\n")
    r = kube.cli("status", SKYD_HOST=URL, KUBECONFIG=str(bad))
    assert r.returncode != 0 and "kubeconfig" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_pod_daemon_killed_comes_back_with_its_state(kube: Kube, tmp_path: Path) -> None:
    """kill -9 of the daemon in the pod: the container restarts (restartPolicy Always), the
    next command reaches the new daemon through the same channel, and what the old one knew
    (SQLite on the volume) is there."""
    import signal

    if (NS, "skyd") not in kube.fake.statefulsets:
        kube.ok("daemon", "deploy", URL, "--binary", str(kube.wrapper), timeout=300)
    task = tmp_path / "t.yaml"
    task.write_text("resources:\n  infra: local\nrun: echo before-the-kill\n")
    kube.ok("launch", "-y", "-c", "kd", str(task), SKYD_HOST=URL, timeout=300)
    old = kube.fake.main_pids["skyd-0"]
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 90
    while True:
        r = kube.cli("status", "-o", "json", SKYD_HOST=URL)
        if r.returncode == 0:
            break
        assert time.monotonic() < deadline, r.stderr
        assert "Traceback" not in r.stderr, r.stderr
        time.sleep(1)
    assert kube.fake.main_pids["skyd-0"] != old
    assert any(c.get("name") == "kd" for c in json.loads(r.stdout))
    r = kube.ok("logs", "kd", "1", SKYD_HOST=URL)
    assert "before-the-kill" in r.stdout
    kube.ok("down", "-y", "kd", SKYD_HOST=URL, timeout=180)


def _certs(d: Path) -> dict[str, Path]:
    """A CA, the API server's certificate (127.0.0.1) and a client certificate, by openssl."""
    def run(*a: str) -> None:
        subprocess.run(["openssl", *a], check=True, capture_output=True, cwd=d, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=fake-kube-ca")
    for name, extra in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}/O=system:masters")
        (d / f"{name}.ext").write_text(extra + "\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")
    return {n: d / n for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


@pytest.mark.skipif(not Path("/usr/bin/openssl").exists(), reason="needs the openssl command")
def test_tls_and_client_certificates(kube: Kube, tmp_path: Path) -> None:
    """An API server over TLS whose kubeconfig gives its CA and a client certificate as
    base64 data (as kind, minikube and kubeadm write them): the CLI's stdlib exec verifies
    the server and authenticates with the certificate; a wrong CA is one clear error."""
    import base64

    import yaml

    if (NS, "skyd") not in kube.fake.statefulsets:
        kube.ok("daemon", "deploy", URL, "--binary", str(kube.wrapper), timeout=300)
    c = _certs(tmp_path)
    port = kube.fake.serve_tls(c["server.crt"], c["server.key"], c["ca.crt"])

    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    def kubeconfig(ca: Path) -> Path:
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "tls",
               "clusters": [{"name": "tls", "cluster": {"server": f"https://127.0.0.1:{port}",
                                                        "certificate-authority-data": b64(ca)}}],
               "users": [{"name": "admin", "user": {"client-certificate-data": b64(c["client.crt"]),
                                                    "client-key-data": b64(c["client.key"])}}],
               "contexts": [{"name": "tls", "context": {"cluster": "tls", "user": "admin",
                                                        "namespace": NS}}]}
        p = tmp_path / f"kubeconfig-{ca.stem}"
        p.write_text(yaml.safe_dump(doc))
        return p

    r = kube.ok("status", "-o", "json", SKYD_HOST="k8s://tls", KUBECONFIG=str(kubeconfig(c["ca.crt"])))
    json.loads(r.stdout)
    r = kube.cli("status", SKYD_HOST="k8s://tls", KUBECONFIG=str(kubeconfig(c["client.crt"])))
    assert r.returncode == 7, r.stderr
    assert "certificate" in r.stderr.lower() and "Traceback" not in r.stderr, r.stderr


def test_image_with_skyd_on_its_path(kube: Kube) -> None:
    """--image: the image brings skyd (here: this checkout's, on the image's PATH); nothing is
    copied; another image replaces it only with --upgrade."""
    url = "k8s://lab/img-ns"
    saved = dict(kube.fake.image_env)
    kube.fake.image_env = {**saved, "PATH": f"{SKYD_BIN.parent}:{os.environ.get('PATH', '/bin')}",
                           "PYTHONPATH": guarded_pythonpath()}
    try:
        r = kube.ok("daemon", "deploy", url, "--image", "ghcr.io/example/skyd:1", timeout=300)
        assert r.stdout.strip() == f"export SKYD_HOST={url}"
        c = kube.fake.statefulsets[("img-ns", "skyd")]["spec"]["template"]["spec"]["containers"][0]
        assert c["image"] == "ghcr.io/example/skyd:1" and c["command"] == ["skyd", "daemon", "run"]
        assert "copied" not in r.stderr
        assert not (kube.fake.root / "volumes" / "img-ns" / "skyd-home" / "bin").exists()
        kube.ok("status", SKYD_HOST=url)
        assert (kube.fake.root / "volumes" / "img-ns" / "skyd-home" / "state.db").exists()
        r = kube.cli("daemon", "deploy", url, "--image", "ghcr.io/example/skyd:2")
        assert r.returncode != 0 and "--upgrade" in r.stderr
        r = kube.cli("daemon", "deploy", url, "--image", "ghcr.io/example/skyd:1", "--binary", "x")
        assert r.returncode == 2 and "--image" in r.stderr
        # An image that cannot be pulled: one message naming it; then a good one with
        # --upgrade replaces the broken pod (which a StatefulSet would leave as it is).
        kube.fake.bad_images = {"ghcr.io/example/nosuch:1"}
        r = kube.cli("daemon", "deploy", url, "--image", "ghcr.io/example/nosuch:1", "--upgrade")
        assert r.returncode != 0 and "ErrImagePull" in r.stderr and "Traceback" not in r.stderr
        broken = kube.fake.pods[("img-ns", "skyd-0")]["metadata"]["uid"]
        kube.ok("daemon", "deploy", url, "--image", "ghcr.io/example/skyd:1", "--upgrade",
                timeout=300)
        assert kube.fake.pods[("img-ns", "skyd-0")]["metadata"]["uid"] != broken
        kube.ok("status", SKYD_HOST=url)
    finally:
        kube.fake.image_env = saved
        kube.fake.bad_images = set()


def test_k8s_url_forms() -> None:
    """The forms kubectl users expect, and a context name with '/' (EKS ARNs) as %2F."""
    from skyd.sdk.kubehost import KubeTarget, parse_k8s

    arn = "arn:aws:eks:us-west-2:123456789012:cluster/prod"
    cases = {"k8s://": KubeTarget(None, None), "k8s:///team": KubeTarget(None, "team"),
             "k8s://Lab_Ctx": KubeTarget("Lab_Ctx", None),
             "k8s://lab/team": KubeTarget("lab", "team"),
             "k8s://lab/team?name=skyd2": KubeTarget("lab", "team", "skyd2"),
             "k8s://arn:aws:eks:us-west-2:123456789012:cluster%2Fprod/ml": KubeTarget(arn, "ml")}
    for url, want in cases.items():
        got = parse_k8s(url)
        assert got == want, url
        assert parse_k8s(got.url()) == got, got.url()
