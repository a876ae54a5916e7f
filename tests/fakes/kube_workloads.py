"""The fake Kubernetes API server's workloads part (tests/fakes/kubeapi.py): core/v1
serviceaccounts and persistentvolumeclaims, apps/v1 statefulsets with the controller's part skyd relies on, a pod's own
container process with its volumes as directories, and an HTTPS listener with client
certificates. A mixin of ``FakeKube``; its state lives there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import web

from tests.fakes.kube_objects import Collection, refusal


class Workloads:
    root: Path
    nodes: dict[str, dict[str, Any]]
    pods: dict[tuple[str, str], dict[str, Any]]
    pvcs: dict[tuple[str, str], dict[str, Any]]
    created: dict[str, float]
    serviceaccounts: dict[tuple[str, str], dict[str, Any]]
    statefulsets: dict[tuple[str, str], dict[str, Any]]
    image_env: dict[str, str]
    main_logs: dict[str, Path]
    main_pids: dict[str, int]
    _mains: dict[str, asyncio.Task[None]]
    _emptydirs: dict[str, dict[str, str]]
    _rv: int
    _runner: Any

    def _run(self, coro: Any) -> Any:
        raise NotImplementedError

    def _invalid(self, body: Any, kind: str) -> web.Response | None:
        raise NotImplementedError

    def _schedule(self) -> None:
        raise NotImplementedError

    async def _kill_pod(self, p: dict[str, Any]) -> None:
        raise NotImplementedError

    def sandbox(self, p: dict[str, Any]) -> Path:
        raise NotImplementedError

    def serve_tls(self, cert: Path, key: Path, client_ca: Path) -> int:
        """Also serve HTTPS (the same API) on another port, as an API server does: its
        certificate ``cert``; a client certificate signed by ``client_ca`` authenticates a
        request without a token. Returns the port."""
        import ssl

        async def start() -> int:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(str(cert), str(key))
            ctx.load_verify_locations(str(client_ca))
            ctx.verify_mode = ssl.CERT_OPTIONAL
            site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ctx)
            await site.start()
            return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

        return int(self._run(start()))

    # -- serviceaccounts (core/v1) ---------------------------------------------------------

    # -- statefulsets (apps/v1) and their controller ---------------------------------------

    def _sts_invalid(self, body: Any) -> web.Response | None:
        bad = self._invalid(body, "V1StatefulSet")
        if bad is not None:
            return bad
        spec = body.get("spec") or {}
        tmpl = spec.get("template") or {}
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        tl = (tmpl.get("metadata") or {}).get("labels") or {}
        name = (body.get("metadata") or {}).get("name", "")
        # the API server's validation (apps/validation): a selector matching the template
        if not sel or any(tl.get(k) != v for k, v in sel.items()):
            return refusal(422, "Invalid", f'StatefulSet.apps "{name}" is invalid: spec.template.metadata.labels: '
                                           "Invalid value: `selector` does not match template `labels`")
        if not (tmpl.get("spec") or {}).get("containers"):
            return refusal(422, "Invalid", f'StatefulSet.apps "{name}" is invalid: '
                                           "spec.template.spec.containers: Required value")
        return None

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    async def _create_sts(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        body = await request.json()
        bad = self._sts_invalid(body)
        if bad is not None:
            return bad
        name = body["metadata"]["name"]
        if (ns, name) in self.statefulsets:
            return refusal(409, "AlreadyExists", f'statefulsets.apps "{name}" already exists')
        body["metadata"].update(namespace=ns, uid=str(uuid.uuid4()), resourceVersion=self._next_rv(),
                                generation=1)
        self.statefulsets[(ns, name)] = body
        await self._reconcile(ns, name)
        return web.json_response(body, status=201)

    async def _get_sts(self, request: web.Request) -> web.Response:
        v = self.statefulsets.get((request.match_info["ns"], request.match_info["name"]))
        if v is None:
            return refusal(404, "NotFound", f'statefulsets.apps "{request.match_info["name"]}" not found')
        return web.json_response(v)

    async def _replace_sts(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        cur = self.statefulsets.get((ns, name))
        if cur is None:
            return refusal(404, "NotFound", f'statefulsets.apps "{name}" not found')
        body = await request.json()
        bad = self._sts_invalid(body)
        if bad is not None:
            return bad
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv != cur["metadata"]["resourceVersion"]:
            return refusal(409, "Conflict", f'Operation cannot be fulfilled on statefulsets.apps "{name}": '
                                            "the object has been modified; please apply your changes to the "
                                            "latest version and try again")
        if body["spec"].get("selector") != cur["spec"].get("selector"):
            return refusal(422, "Invalid", f'StatefulSet.apps "{name}" is invalid: spec: Forbidden: updates to '
                                           "statefulset spec for fields other than 'replicas', 'ordinals', "
                                           "'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' "
                                           "and 'minReadySeconds' are forbidden")
        changed = body["spec"]["template"] != cur["spec"]["template"]
        body["metadata"].update(namespace=ns, uid=cur["metadata"]["uid"], resourceVersion=self._next_rv(),
                                generation=cur["metadata"]["generation"] + int(changed))
        self.statefulsets[(ns, name)] = body
        if changed:  # RollingUpdate: each pod is replaced by one from the new template, but
            # a pod that never became Running and Ready stays as it is, and the rollout waits
            # (Kubernetes docs, StatefulSet "Forced rollback": delete such pods yourself)
            for i in range(int(cur["spec"].get("replicas", 1))):
                p = self.pods.get((ns, f"{name}-{i}"))
                if p is not None and p["status"].get("phase") == "Running":
                    del self.pods[(ns, f"{name}-{i}")]
                    await self._kill_pod(p)
        await self._reconcile(ns, name)
        return web.json_response(body)

    async def _delete_sts(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        v = self.statefulsets.pop((ns, name), None)
        if v is None:
            return refusal(404, "NotFound", f'statefulsets.apps "{name}" not found')
        for (pns, pn), p in list(self.pods.items()):
            if pns == ns and pn.rsplit("-", 1)[0] == name:
                self.pods.pop((pns, pn), None)
                await self._kill_pod(p)
        return web.json_response(v)

    async def _reconcile(self, ns: str, name: str) -> None:
        """The StatefulSet controller: pods NAME-0..N-1 from the template, when missing."""
        sts = self.statefulsets.get((ns, name))
        if sts is None:
            return
        tmpl = sts["spec"]["template"]
        for i in range(int(sts["spec"].get("replicas", 1))):
            pod_name = f"{name}-{i}"
            if (ns, pod_name) in self.pods:
                continue
            meta = json.loads(json.dumps(tmpl.get("metadata") or {}))
            meta.update(name=pod_name, namespace=ns, uid=str(uuid.uuid4()),
                        creationTimestamp="2026-01-01T00:00:00Z")
            meta.setdefault("labels", {})["statefulset.kubernetes.io/pod-name"] = pod_name
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                   "spec": json.loads(json.dumps(tmpl["spec"])),
                   "status": {"phase": "Pending", "conditions": []}}
            pod["spec"]["hostname"] = pod_name
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                                        "uid": sts["metadata"]["uid"], "controller": True}]
            self.created[pod_name] = time.perf_counter()
            self.pods[(ns, pod_name)] = pod
        self._schedule()

    # -- volumes and the container's own process -------------------------------------------

    def _mounts(self, p: dict[str, Any]) -> dict[str, Path]:
        """mountPath -> the directory on this machine that stands for it."""
        ns = p["metadata"].get("namespace", "")
        vols = {v["name"]: v for v in p["spec"].get("volumes") or []}
        dirs = self._emptydirs.setdefault(p["metadata"]["uid"], {})
        out: dict[str, Path] = {}
        for m in p["spec"]["containers"][0].get("volumeMounts") or []:
            v = vols.get(m["name"]) or {}
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                d = self.root / "volumes" / ns / claim
            elif "emptyDir" in v:
                if m["name"] not in dirs:  # short: a Unix socket may live there
                    import tempfile

                    dirs[m["name"]] = tempfile.mkdtemp(prefix="fk-")
                d = Path(dirs[m["name"]])
            else:
                continue
            d.mkdir(parents=True, exist_ok=True)
            out[m["mountPath"].rstrip("/")] = d
        return out

    def _container_env(self, p: dict[str, Any]) -> dict[str, str]:
        mounts = self._mounts(p)
        env = dict(self.image_env)
        for e in p["spec"]["containers"][0].get("env") or []:
            val = str(e.get("value", ""))
            for mp, d in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
                if val == mp or val.startswith(mp + "/"):
                    val = str(d) + val[len(mp):]
                    break
            env[e["name"]] = val
        return env

    async def _run_main(self, p: dict[str, Any]) -> None:
        """The container's command, restarted when it exits (restartPolicy Always)."""
        c = p["spec"]["containers"][0]
        argv = [*c["command"], *(c.get("args") or [])]
        box = self.sandbox(p)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(box),
               "SKYD_FAKE_POD": p["metadata"]["uid"], "HOSTNAME": p["metadata"]["name"],
               **self._container_env(p)}
        log = self.root / "logs" / f"{p['metadata']['name']}-{p['metadata']['uid'][:8]}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.main_logs[p["metadata"]["name"]] = log
        restarts = 0
        while True:
            with open(log, "ab") as out:
                proc = await asyncio.create_subprocess_exec(
                    *argv, cwd=box, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                    stderr=out, start_new_session=True)
            self.main_pids[p["metadata"]["name"]] = proc.pid
            try:
                await proc.wait()
            except asyncio.CancelledError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                raise
            restarts += 1
            for cs in p["status"].get("containerStatuses") or []:
                cs["restartCount"] = restarts
            await asyncio.sleep(min(10.0, 0.5 * restarts))

    # -- persistentvolumeclaims (core/v1; validation as the API server's for PVC create:
    # metadata.name a DNS-1123 subdomain, spec.accessModes required and from the enum,
    # spec.resources.requests.storage required and a quantity) ----------------------------

    _PVC_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")

    def _pvc_invalid(self, body: Any) -> web.Response | None:
        """What the API server refuses in a PersistentVolumeClaim skyd sends."""
        import re

        name = str((body.get("metadata") or {}).get("name") or "")
        spec = body.get("spec") or {}
        modes = spec.get("accessModes") or []
        storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
        if not re.match(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", name):
            return refusal(422, "Invalid", f'PersistentVolumeClaim "{name}" is invalid: metadata.name')
        if not modes or any(m not in self._PVC_MODES for m in modes):
            return refusal(422, "Invalid", f'PersistentVolumeClaim "{name}" is invalid: spec.accessModes')
        if not storage or not re.match(r"^[0-9.]+([KMGTPE]i?|k)?$", str(storage)):
            return refusal(422, "Invalid",
                          f'PersistentVolumeClaim "{name}" is invalid: spec.resources[storage]')
        return None

    async def _patch_labels(self, kind: Collection, request: web.Request) -> web.Response:
        """A strategic- or JSON-merge patch of an object's labels (what skyd patches)."""
        v = kind.find(request)
        if v is None:
            return refusal(404, "NotFound", f'{kind.plural} "{request.match_info["name"]}" not found')
        if request.content_type not in ("application/strategic-merge-patch+json",
                                        "application/merge-patch+json"):
            return refusal(415, "UnsupportedMediaType", f"unsupported patch type {request.content_type}")
        patch = await request.json()
        labels = v["metadata"].setdefault("labels", {})
        for k, val in ((patch.get("metadata") or {}).get("labels") or {}).items():
            if val is None:
                labels.pop(k, None)
            else:
                labels[k] = val
        return web.json_response(v)

