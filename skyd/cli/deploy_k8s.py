"""``skyd daemon deploy k8s://CONTEXT/NAMESPACE``: the daemon as a one-replica StatefulSet
whose state (SKYD_HOME: SQLite, logs, keys) is a PersistentVolumeClaim.

What is made in the namespace (all named after the StatefulSet, ``skyd`` by default, and
labelled ``app.kubernetes.io/managed-by: skyd``):

- ServiceAccount ``skyd`` (created when missing; its roles are the cluster admin's call);
- PersistentVolumeClaim ``skyd-home`` (ReadWriteOnce, 10Gi, the default storage class):
  mounted at ``/var/lib/skyd`` = ``SKYD_HOME``; it outlives the StatefulSet;
- StatefulSet ``skyd`` (1 replica, pod ``skyd-0``) running ``skyd daemon run``; its socket is
  on an ``emptyDir`` (``/run/skyd``), not on the volume (network filesystems and sockets).

Which skyd runs, two ways:

- default: a stock image (``python:3.11-slim``) and the single-file executable copied onto
  the volume through the API server's exec (``$SKYD_HOME/bin/skyd-<sha256 prefix>``, one file
  per build); the container waits for it, then runs it. No registry, no image build; the binary's sha256 is the pod template's
  annotation ``skyd.dev/binary-sha256``, so a different build rolls the pod.
- ``--image IMAGE``: an image with ``skyd`` on its PATH (nothing is copied).

Idempotent: objects that exist are left alone, an identical binary is not sent again, and a
StatefulSet whose template differs is replaced only with ``--upgrade`` (SIGTERM to the old
daemon; the new one resumes requests, jobs and services from the SQLite on the volume).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from skyd.errors import InvalidSpecError, SkydError
from skyd.sdk.kubehost import CONTAINER, KubeTarget, resolve

DEFAULT_IMAGE = "python:3.11-slim"
HOME_MOUNT = "/var/lib/skyd"
RUN_MOUNT = "/run/skyd"
STORAGE = "10Gi"
SHA_ANNOTATION = "skyd.dev/binary-sha256"
MANAGED = {"app.kubernetes.io/managed-by": "skyd"}
WAIT_S = 300.0
# The container in binary mode: wait for the executable deploy copies onto the volume.
WAIT_AND_RUN = 'until [ -x "$SKYD_BIN" ]; do sleep 1; done; exec "$SKYD_BIN" daemon run'


def labels(t: KubeTarget) -> dict[str, str]:
    return {"app.kubernetes.io/name": "skyd", "app.kubernetes.io/instance": t.name}


def service_account(t: KubeTarget) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": t.name, "labels": {**labels(t), **MANAGED}}}


def pvc(t: KubeTarget) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"{t.name}-home", "labels": {**labels(t), **MANAGED}},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": STORAGE}}}}


def statefulset(t: KubeTarget, *, image: str | None, sha: str | None) -> dict[str, Any]:
    """The StatefulSet: ``sha`` (binary mode) or ``image`` (an image with skyd on PATH)."""
    env = [{"name": "SKYD_HOME", "value": HOME_MOUNT},
           {"name": "SKYD_CONFIG_DIR", "value": f"{HOME_MOUNT}/config"},
           {"name": "SKYD_SOCKET", "value": f"{RUN_MOUNT}/skyd.sock"},
           # dial-stdio waits for this daemon instead of starting a second one
           {"name": "SKYD_NO_AUTOSTART", "value": "1"},
           {"name": "SKYD_BIN", "value": binary_path(sha) if sha else "skyd"}]
    container: dict[str, Any] = {
        "name": CONTAINER, "image": image or DEFAULT_IMAGE,
        "command": ["/bin/sh", "-c", WAIT_AND_RUN] if sha else ["skyd", "daemon", "run"],
        "env": env,
        "volumeMounts": [{"name": "home", "mountPath": HOME_MOUNT},
                         {"name": "run", "mountPath": RUN_MOUNT}],
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
    }
    template_meta: dict[str, Any] = {"labels": labels(t)}
    if sha:
        template_meta["annotations"] = {SHA_ANNOTATION: sha}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": t.name, "labels": {**labels(t), **MANAGED}},
        "spec": {
            "replicas": 1, "serviceName": t.name,
            "selector": {"matchLabels": labels(t)},
            "template": {"metadata": template_meta, "spec": {
                "serviceAccountName": t.name,
                "terminationGracePeriodSeconds": 60,
                "containers": [container],
                "volumes": [{"name": "home",
                             "persistentVolumeClaim": {"claimName": f"{t.name}-home"}},
                            {"name": "run", "emptyDir": {}}]}},
        },
    }


def binary_path(sha: str) -> str:
    """Where a build lives on the volume: per build, so a pod of the new template never
    starts the old one, and the old pod keeps its file until it is gone."""
    return f"{HOME_MOUNT}/bin/skyd-{sha[:16]}"


def _ours(template: dict[str, Any]) -> Any:
    """The part of a pod template deploy decides (what a server adds is left out)."""
    c = ((template.get("spec") or {}).get("containers") or [{}])[0]
    return [c.get("image"), c.get("command"), c.get("env"),
            ((template.get("metadata") or {}).get("annotations") or {}).get(SHA_ANNOTATION)]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class _API:
    """The few REST calls deploy makes, with the context's own auth and TLS."""

    def __init__(self, t: KubeTarget) -> None:
        from skyd.clouds.kubernetes.api import ContextAPI

        assert t.context is not None and t.namespace is not None
        self.t = t
        self.ctx = ContextAPI(t.context, t.namespace)
        self.conn: Any = None

    async def __call__(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        import aiohttp

        if self.conn is None:
            self.conn = await self.ctx.exec_conn()
        c = self.conn
        headers = dict(await c.auth() if c.auth is not None else c.headers)
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        try:
            async with c.session().request(method, c.server + path, data=data, headers=headers,
                                           ssl=c.ssl, timeout=aiohttp.ClientTimeout(total=60)) as r:
                text = await r.text()
                status = r.status
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise SkydError(f"kubernetes context {self.t.context!r}: API server unreachable: "
                            f"{type(e).__name__}: {e}") from None
        try:
            doc = json.loads(text) if text else {}
        except ValueError:
            doc = {"message": text[:200]}
        return status, doc if isinstance(doc, dict) else {}

    async def ok(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        status, doc = await self(method, path, body)
        if not 200 <= status <= 299:
            raise SkydError(f"{method} {path} on {self.t.url()}: HTTP {status}: "
                            f"{doc.get('message') or doc.get('reason') or ''}",
                            hint="check that your kubeconfig user may manage serviceaccounts, "
                                 "persistentvolumeclaims and statefulsets in namespace "
                                 f"{self.t.namespace!r} (`kubectl auth can-i`)")
        return doc

    async def close(self) -> None:
        await self.ctx.close()


async def _ensure(api: _API, path: str, body: dict[str, Any], what: str, out: list[str]) -> bool:
    """Create ``body`` under ``path`` unless it exists; True when it was created."""
    status, _ = await api("GET", f"{path}/{body['metadata']['name']}")
    if status == 200:
        return False
    if status != 404:
        await api.ok("GET", f"{path}/{body['metadata']['name']}")  # raises with the message
    await api.ok("POST", path, body)
    out.append(f"created {what} {body['metadata']['name']} in {api.t.url()}")
    return True


async def _wait_pod(api: _API, t: KubeTarget, want: dict[str, Any], deadline: float) -> None:
    """Until the pod runs the wanted template and its container is up. A pod of another
    template that cannot start (a bad image) is deleted: a StatefulSet does not replace a
    broken pod by itself (Kubernetes' "forced rollback")."""
    last = ""
    deleted: set[str] = set()
    path = f"/api/v1/namespaces/{t.namespace}/pods/{t.pod}"
    while time.monotonic() < deadline:
        status, pod = await api("GET", path)
        if status == 200:
            meta, st = pod.get("metadata") or {}, pod.get("status") or {}
            current = _ours({"metadata": meta, "spec": pod.get("spec") or {}}) == _ours(want)
            stuck = ""
            for cs in st.get("containerStatuses") or []:
                waiting = (cs.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff",
                                             "InvalidImageName", "CrashLoopBackOff"):
                    stuck = f"{waiting.get('reason')}: {waiting.get('message', '')}"
            if stuck and current:
                raise SkydError(f"pod {t.pod} cannot start: {stuck}",
                                hint="check --image (it needs skyd on its PATH) or pull "
                                     "access to it")
            if not current and (stuck or st.get("phase") not in ("Running", None)) \
                    and meta.get("uid") not in deleted:
                await api("DELETE", path)
                deleted.add(str(meta.get("uid")))
            conds = st.get("conditions") or []
            last = "; ".join(str(c.get("message")) for c in conds if c.get("message")) or \
                str(st.get("phase"))
            if current and st.get("phase") == "Running" and meta.get("deletionTimestamp") is None:
                return
        await asyncio.sleep(0.5)
    raise SkydError(f"pod {t.pod} in {t.url()} did not start within {WAIT_S:g}s: {last}",
                    hint=f"check `{' '.join(t.destination())} describe pod {t.pod}`")


async def _deploy(t: KubeTarget, *, bin_path: Path | None, image: str | None, upgrade: bool,
                  out: list[str]) -> None:
    from skyd.transports.kube import KubeTransport

    sha = await asyncio.to_thread(_sha256, bin_path) if bin_path is not None else None
    api = _API(t)
    ns = t.namespace
    try:
        await _ensure(api, f"/api/v1/namespaces/{ns}/serviceaccounts", service_account(t),
                      "serviceaccount", out)
        await _ensure(api, f"/api/v1/namespaces/{ns}/persistentvolumeclaims", pvc(t),
                      "persistentvolumeclaim", out)
        want = statefulset(t, image=image, sha=sha)
        base = f"/apis/apps/v1/namespaces/{ns}/statefulsets"
        status, have = await api("GET", f"{base}/{t.name}")
        deadline = time.monotonic() + WAIT_S
        tr = KubeTransport(await api.ctx.exec_conn(), str(ns), t.pod, CONTAINER)
        if status == 404:
            await api.ok("POST", base, want)
            out.append(f"created statefulset {t.name} in {t.url()}")
        elif status != 200:
            await api.ok("GET", f"{base}/{t.name}")
        elif _ours(have["spec"]["template"]) != _ours(want["spec"]["template"]):
            if not upgrade:
                raise SkydError(f"another skyd build or image runs in {t.url()} (statefulset "
                                f"{t.name})", hint="pass --upgrade to replace it (its state, "
                                                   "jobs and services are kept)")
            want["metadata"]["resourceVersion"] = have["metadata"].get("resourceVersion")
            await api.ok("PUT", f"{base}/{t.name}", want)
            out.append(f"rolled statefulset {t.name} in {t.url()} to the new "
                       + ("build" if sha else f"image {image}"))
        else:
            out.append(f"statefulset {t.name} in {t.url()} is up to date")
        await _wait_pod(api, t, want["spec"]["template"], deadline)
        if sha is not None and bin_path is not None:
            r = await tr.run('sha256sum "$SKYD_BIN" 2>/dev/null | cut -d" " -f1', timeout=60,
                             idempotent=True)
            if r.stdout.strip() != sha:
                # the pod's container waits for this file, then runs it
                data = await asyncio.to_thread(bin_path.read_bytes)
                await tr.run('umask 077 && mkdir -p "$(dirname "$SKYD_BIN")" && '
                             'cat > "$SKYD_BIN.new" && chmod 700 "$SKYD_BIN.new" && '
                             'mv -f "$SKYD_BIN.new" "$SKYD_BIN"', input=data, check=True,
                             timeout=600)
                out.append(f"copied {bin_path.name} ({len(data) // (1 << 20)} MiB) to "
                           f"{binary_path(sha)} on the volume {t.name}-home")
            # older builds on the volume: no pod of the current template runs them
            await tr.run('for f in "$(dirname "$SKYD_BIN")"/skyd-*; do '
                         '[ "$f" = "$SKYD_BIN" ] || rm -f "$f"; done', timeout=60)
        tr = KubeTransport(await api.ctx.exec_conn(), str(ns), t.pod, CONTAINER)
        while True:  # the daemon answers in the pod
            r = await tr.run('"$SKYD_BIN" daemon status -o json', timeout=60)
            if r.ok:
                break
            if time.monotonic() > deadline:
                raise SkydError(f"the daemon in pod {t.pod} did not answer within {WAIT_S:g}s: "
                                f"{(r.stderr or r.stdout).strip()[-300:]}",
                                hint=f"check `{' '.join(t.destination())} logs {t.pod}`")
            await asyncio.sleep(1)
        out.append(f"daemon runs in pod {t.pod} (statefulset {t.name}, state on "
                   f"persistentvolumeclaim {t.name}-home)")
    finally:
        await api.close()


def deploy(t: KubeTarget, *, binary: str | None, image: str | None, upgrade: bool,
           out: list[str]) -> KubeTarget:
    """Create or update the daemon's objects; returns the target with its context and
    namespace filled in (what clients should use)."""
    from skyd.cli.deploy import local_binary

    t = resolve(t)
    if image is not None and binary is not None:
        raise InvalidSpecError("--image and --binary exclude each other", field="--image",
                               hint="--image names an image with skyd on its PATH; --binary "
                                    "copies an executable into a stock image")
    if image is not None and (not image.strip() or any(c.isspace() for c in image)):
        raise InvalidSpecError(f"--image {image!r} is not an image reference", field="--image",
                               hint="for example ghcr.io/me/skyd:1.2")
    bin_path = local_binary(binary) if image is None else None
    asyncio.run(_deploy(t, bin_path=bin_path, image=image, upgrade=upgrade, out=out))
    return t
