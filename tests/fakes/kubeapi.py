"""A fake Kubernetes API server (aiohttp, 127.0.0.1) speaking the wire format
kubernetes-asyncio uses: core/v1 pods, services, nodes (list/get/create/delete, label and
field selectors), a tiny scheduler (allocatable per node, taints and tolerations, node
affinity, the scheduler's real ``0/N nodes are available: ...`` messages), image pull
failures, RBAC refusals per namespace, and pod ``exec`` over WebSocket (``v4.channel.k8s.io``
framing, ``v5`` on request) that really runs the command in a per-pod sandbox directory on
this machine, so a node agent runs "in" the pod.

A pod shows its GPUs the way its image lets it (tests/fakes/gpuprofile.py): the GPUs the
device plugin gave it (its ``resources`` request on the node) are of the card installed on
the node (``cards[node]``; by default what the node's labels say), and show to ``nvidia-smi``
on any image (the NVIDIA container toolkit mounts the tool and the driver into the
container) but to ``amd-smi`` only on an image with ROCm (the AMD device plugin passes
``/dev/kfd`` and ``/dev/dri``; the userland comes from the image).

Also core/v1 serviceaccounts and apps/v1 statefulsets with the controller's part that skyd
relies on (one pod ``NAME-I`` per replica from the template; a changed template replaces the
pods, a deleted pod comes back). A pod whose container has a ``command`` runs it as a local
process (restartPolicy Always: restarted when it exits), with the container's ``env`` (exec
sessions get it too, as in a real container) plus ``image_env`` (what an image's ``ENV``
would set). Volumes are directories on this machine: a ``persistentVolumeClaim`` one per
claim (it outlives pods), an ``emptyDir`` one per pod; an env value under a ``mountPath`` is
rewritten to that directory (the one liberty taken: processes here share one filesystem).

It runs on its own event loop in a thread, so it outlives daemons the tests kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.kube_objects import Collection, match_labels, refusal
from tests.fakes.kube_workloads import Workloads

TOKEN = "fake-kube-token"
_KUBE: Any = None


def kube_spec() -> Any:
    """core/v1 as the kubernetes_asyncio client's generated models describe it."""
    global _KUBE
    if _KUBE is None:
        from kubernetes_asyncio.client import models

        from tests.fakes.specs import Spec

        _KUBE = Spec.kubernetes(models)
    return _KUBE


def gpu_node(name: str, labels: dict[str, str], *, cpu: str = "32", memory: str = "128Gi",
             gpus: dict[str, int] | None = None, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": "110", **{k: str(v) for k, v in (gpus or {}).items()}}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels},
                         "uid": str(uuid.uuid4())},
            "spec": {"taints": taints or []},
            "status": {"allocatable": alloc, "capacity": alloc,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _cpu(v: Any) -> float:
    s = str(v)
    return float(s[:-1]) / 1000 if s.endswith("m") else float(s)


def _mem(v: Any) -> float:
    s = str(v)
    for u, f in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40)):
        if s.endswith(u):
            return float(s[:-2]) * f
    return float(s)


def _qty(key: str, v: Any) -> float:
    return _cpu(v) if key == "cpu" else _mem(v) if key == "memory" else float(v)


def _field(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for p in path.split("."):
        cur = (cur or {}).get(p)
    return "" if cur is None else str(cur)


def _match_fields(sel: str, obj: dict[str, Any]) -> bool:
    for part in filter(None, (p.strip() for p in sel.split(","))):
        if "!=" in part:
            k, v = part.split("!=", 1)
            if _field(obj, k) == v:
                return False
        elif "=" in part:
            k, v = part.split("=", 1)
            if _field(obj, k.rstrip("=")) != v:
                return False
    return True


class FakeKube(Workloads):
    def __init__(self, root: Path, *, user: str = "system:serviceaccount:skyd:tester") -> None:
        self.root = Path(root)
        self.user = user
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.rejected: list[list[str]] = []  # what the core/v1 models refused, per request
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.pvcs: dict[tuple[str, str], dict[str, Any]] = {}
        self.forbidden: set[str] = set()
        self.bad_images: set[str] = set()
        self.cards: dict[str, str] = {}  # node -> the card really installed (labels can be wrong)
        self.protocols: tuple[str, ...] = ("v4.channel.k8s.io",)
        self.calls: dict[str, int] = {}
        self.exec_calls = 0
        self.hold = False  # pause point: new pods stay Pending, unscheduled (no condition yet)
        self.created: dict[str, float] = {}  # pod name -> time.perf_counter() at create
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._procs: set[asyncio.subprocess.Process] = set()
        self.serviceaccounts: dict[tuple[str, str], dict[str, Any]] = {}
        self.statefulsets: dict[tuple[str, str], dict[str, Any]] = {}
        self.image_env: dict[str, str] = {}  # what the image's ENV lines set in containers
        self.main_logs: dict[str, Path] = {}  # pod name -> its main process's output
        self.main_pids: dict[str, int] = {}  # pod name -> its main process (now)
        self._mains: dict[str, asyncio.Task[None]] = {}  # pod uid -> the main process loop
        self._rv = 0
        self._emptydirs: dict[str, dict[str, str]] = {}  # pod uid -> volume name -> dir

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- knobs ----------------------------------------------------------------------------

    def add_node(self, node: dict[str, Any]) -> None:
        self.nodes[node["metadata"]["name"]] = node

    def live(self, label: str | None = None) -> list[str]:
        """Names of pods and services (optionally carrying label key ``label``)."""
        out = []
        for (ns, n), o in list(self.pods.items()) + list(self.services.items()):
            if label is None or label in (o["metadata"].get("labels") or {}):
                out.append(f"{o['kind']}/{ns}/{n}")
        return sorted(out)

    def evict(self, ns: str, name: str) -> None:
        self._run(self._evict(ns, name))

    async def _evict(self, ns: str, name: str) -> None:
        p = self.pods.get((ns, name))
        if p is not None:
            await self._kill_pod(p)
            p["status"].update(phase="Failed", reason="Evicted",
                               message="The node was low on resource: memory.")

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(60)

    def kubeconfig(self, path: Path, contexts: dict[str, str], *, token: str = TOKEN,
                   servers: dict[str, str] | None = None) -> Path:
        """A kubeconfig whose contexts (name -> namespace) point at this server (or at
        ``servers[name]``)."""
        import yaml

        doc = {"apiVersion": "v1", "kind": "Config", "current-context": next(iter(contexts)),
               "clusters": [{"name": c, "cluster": {"server": (servers or {}).get(c, self.url)}}
                            for c in contexts],
               "users": [{"name": "tester", "user": {"token": token}}],
               "contexts": [{"name": c, "context": {"cluster": c, "user": "tester", "namespace": ns}}
                            for c, ns in contexts.items()]}
        path.write_text(yaml.safe_dump(doc))
        return path

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeKube:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="fake-kube",
                                        daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "fake kube API did not start"
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(Exception):
                self._run(self._cleanup())
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)

    async def _cleanup(self) -> None:
        self.statefulsets.clear()
        for p in list(self.pods.values()):
            await self._kill_pod(p)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application(middlewares=[self._auth])
        r = app.router
        r.add_get("/api/v1/nodes", self._list_nodes)
        r.add_get("/api/v1/pods", self._list_all_pods)
        r.add_get("/api/v1/namespaces/{ns}/pods", self._list_pods)
        r.add_post("/api/v1/namespaces/{ns}/pods", self._create_pod)
        r.add_get("/api/v1/namespaces/{ns}/pods/{name}", self._get_pod)
        r.add_delete("/api/v1/namespaces/{ns}/pods/{name}", self._delete_pod)
        r.add_get("/api/v1/namespaces/{ns}/pods/{name}/exec", self._exec)
        r.add_post("/api/v1/namespaces/{ns}/pods/{name}/exec", self._exec)
        core = "/api/v1/namespaces/{ns}/"
        Collection("services", "ServiceList", self.services,
                   lambda b: self._invalid(b, "V1Service")).routes(r, core + "services", verbs="lcd")
        pvcs = Collection("persistentvolumeclaims", "PersistentVolumeClaimList", self.pvcs,
                          self._pvc_invalid, admit=lambda b: b.update(status={"phase": "Pending"}))
        pvcs.routes(r, core + "persistentvolumeclaims")
        r.add_patch(core + "persistentvolumeclaims/{name}", lambda req: self._patch_labels(pvcs, req))
        Collection("serviceaccounts", "ServiceAccountList", self.serviceaccounts,
                   lambda b: self._invalid(b, "V1ServiceAccount")).routes(r, core + "serviceaccounts", verbs="cg")
        sts = "/apis/apps/v1/namespaces/{ns}/statefulsets"
        r.add_post(sts, self._create_sts)
        r.add_get(sts + "/{name}", self._get_sts)
        r.add_put(sts + "/{name}", self._replace_sts)
        r.add_delete(sts + "/{name}", self._delete_sts)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = runner.addresses[0][1]
        self._runner = runner
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        key = f"{request.method} {request.match_info.route.resource.canonical if request.match_info.route.resource else request.path}"
        self.calls[key] = self.calls.get(key, 0) + 1
        by_cert = bool(request.transport and request.transport.get_extra_info("peercert"))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}" and not by_cert:
            return refusal(401, "Unauthorized", "Unauthorized")
        ns = request.match_info.get("ns")
        if ns is not None and ns in self.forbidden:
            res = "services" if "/services" in request.path else "pods"
            verb = {"GET": "list", "POST": "create", "DELETE": "delete"}.get(request.method, "get")
            return refusal(403, "Forbidden", f'{res} is forbidden: User "{self.user}" cannot {verb} '
                                             f'resource "{res}" in API group "" in the namespace "{ns}"')
        return await handler(request)  # type: ignore[no-any-return]

    # -- nodes ----------------------------------------------------------------------------

    async def _list_nodes(self, request: web.Request) -> web.Response:
        sel = request.query.get("labelSelector", "")
        items = [n for n in self.nodes.values() if match_labels(sel, n["metadata"]["labels"])]
        return web.json_response({"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items})

    # -- pods -----------------------------------------------------------------------------

    def _pod_list(self, items: list[dict[str, Any]], request: web.Request) -> web.Response:
        self._schedule()
        ls, fs = request.query.get("labelSelector", ""), request.query.get("fieldSelector", "")
        out = [p for p in items if match_labels(ls, p["metadata"].get("labels") or {}) and _match_fields(fs, p)]
        if request.query.get("limit"):
            out = out[: int(request.query["limit"])]
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": out})

    async def _list_all_pods(self, request: web.Request) -> web.Response:
        return self._pod_list(list(self.pods.values()), request)

    async def _list_pods(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        return self._pod_list([p for (n, _), p in self.pods.items() if n == ns], request)

    def _invalid(self, body: Any, kind: str) -> web.Response | None:
        """400 for a body that does not fit the core/v1 model (kubernetes_asyncio's generated
        models). A real server drops unknown fields with a warning (fieldValidation=Warn)
        and refuses wrong types; this fake refuses both: a dropped field is a misreading."""
        errs = kube_spec().check(body, kind, kind.removeprefix("V1").lower())
        if not errs:
            return None
        self.rejected.append(errs)
        return refusal(400, "BadRequest", f"{kind.removeprefix('V1')} in version \"v1\" cannot be "
                       f"handled: {'; '.join(errs)}")

    async def _create_pod(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        body = await request.json()
        bad = self._invalid(body, "V1Pod")
        if bad is not None:
            return bad
        name = body["metadata"]["name"]
        if (ns, name) in self.pods:
            return refusal(409, "AlreadyExists", f'pods "{name}" already exists')
        uid = str(uuid.uuid4())
        self.created[name] = time.perf_counter()
        body["metadata"].update(namespace=ns, uid=uid, creationTimestamp="2026-01-01T00:00:00Z")
        body["status"] = {"phase": "Pending", "conditions": []}
        self.pods[(ns, name)] = body
        self._schedule()
        return web.json_response(body, status=201)

    async def _get_pod(self, request: web.Request) -> web.Response:
        p = self.pods.get((request.match_info["ns"], request.match_info["name"]))
        if p is None:
            return refusal(404, "NotFound", f'pods "{request.match_info["name"]}" not found')
        return web.json_response(p)

    async def _delete_pod(self, request: web.Request) -> web.Response:
        ns, name = request.match_info["ns"], request.match_info["name"]
        p = self.pods.pop((ns, name), None)
        if p is None:
            return refusal(404, "NotFound", f'pods "{name}" not found')
        await self._kill_pod(p)
        for ref in p["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "StatefulSet":  # its controller brings the pod back
                await self._reconcile(ns, ref["name"])
        return web.json_response(p)

    def sandbox(self, p: dict[str, Any]) -> Path:
        return self.root / "pods" / p["metadata"]["uid"]

    async def _kill_pod(self, p: dict[str, Any]) -> None:
        """Kill every process started by an exec into the pod (found by its marker in the
        environment: agents detach into sessions of their own), then drop its files."""
        main = self._mains.pop(p["metadata"]["uid"], None)
        if main is not None:
            main.cancel()
        marker = f"SKYD_FAKE_POD={p['metadata']['uid']}".encode()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if marker in env.split(b"\0"):
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
        await asyncio.sleep(0.05)
        shutil.rmtree(self.sandbox(p), ignore_errors=True)
        for d in self._emptydirs.pop(p["metadata"]["uid"], {}).values():
            shutil.rmtree(d, ignore_errors=True)

    # -- the scheduler --------------------------------------------------------------------

    def _requests(self, p: dict[str, Any]) -> dict[str, float]:
        out: dict[str, float] = {}
        for c in p["spec"].get("containers") or []:
            res = c.get("resources") or {}
            for k, v in {**(res.get("requests") or {}), **(res.get("limits") or {})}.items():
                out[k] = out.get(k, 0.0) + _qty(k, v)
        return out

    def _why_not(self, node: dict[str, Any], p: dict[str, Any], used: dict[str, float]) -> str | None:
        spec = p["spec"]
        tol = spec.get("tolerations") or []
        for t in node["spec"].get("taints") or []:
            if t.get("effect") not in ("NoSchedule", "NoExecute"):
                continue
            if not any(x.get("key") == t.get("key") and (x.get("operator") == "Exists" or x.get("value") == t.get("value"))
                       for x in tol):
                return f"node(s) had untolerated taint {{{t['key']}: {t.get('value', '')}}}"
        labels = node["metadata"]["labels"]
        if not match_labels(",".join(f"{k}={v}" for k, v in (spec.get("nodeSelector") or {}).items()), labels):
            return "node(s) didn't match Pod's node affinity/selector"
        terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
        if terms:
            def ok(e: dict[str, Any]) -> bool:
                if e["operator"] == "Exists":
                    return e["key"] in labels
                return labels.get(e["key"]) in (e.get("values") or [])

            if not any(all(ok(e) for e in t.get("matchExpressions") or []) for t in terms):
                return "node(s) didn't match Pod's node affinity/selector"
        alloc = node["status"]["allocatable"]
        for k, v in self._requests(p).items():
            if v > _qty(k, alloc.get(k, 0)) - used.get(k, 0.0) + 1e-9:
                return f"Insufficient {k}"
        return None

    def _schedule(self) -> None:
        if self.hold:
            return
        used: dict[str, dict[str, float]] = {n: {} for n in self.nodes}
        for p in self.pods.values():
            nn = p["spec"].get("nodeName")
            if nn and p["status"].get("phase") not in ("Succeeded", "Failed") and nn in used:
                for k, v in self._requests(p).items():
                    used[nn][k] = used[nn].get(k, 0.0) + v
        for p in self.pods.values():
            if p["spec"].get("nodeName") or p["status"].get("phase") != "Pending":
                continue
            reasons: dict[str, int] = {}
            for name in sorted(self.nodes):
                why = self._why_not(self.nodes[name], p, used[name])
                if why is None:
                    self._bind(p, name)
                    for k, v in self._requests(p).items():
                        used[name][k] = used[name].get(k, 0.0) + v
                    break
                reasons[why] = reasons.get(why, 0) + 1
            else:
                n = len(self.nodes)
                detail = ", ".join(f"{c} {r}" for r, c in sorted(reasons.items()))
                msg = (f"0/{n} nodes are available: {detail}. preemption: 0/{n} nodes are available: "
                       f"{n} Preemption is not helpful for scheduling.")
                p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                              "reason": "Unschedulable", "message": msg}]

    def _bind(self, p: dict[str, Any], node: str) -> None:
        p["spec"]["nodeName"] = node
        image = p["spec"]["containers"][0]["image"]
        st = p["status"]
        st["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        st["hostIP"] = "127.0.0.1"
        if image in self.bad_images:
            st["containerStatuses"] = [{"name": p["spec"]["containers"][0]["name"], "image": image, "ready": False,
                                        "state": {"waiting": {"reason": "ErrImagePull", "message": (
                                            f'failed to pull and unpack image "docker.io/library/{image}": '
                                            f'failed to resolve reference "docker.io/library/{image}": not found')}}}]
            return
        self.sandbox(p).mkdir(parents=True, exist_ok=True)
        if p["spec"]["containers"][0].get("command"):
            self._mains[p["metadata"]["uid"]] = asyncio.ensure_future(self._run_main(p))
        st.update(phase="Running", podIP="127.0.0.1",
                  containerStatuses=[{"name": p["spec"]["containers"][0]["name"], "image": image, "ready": True,
                                      "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}}])

    # -- services -------------------------------------------------------------------------

    def _visible_gpus(self, p: dict[str, Any]) -> tuple[str, int, str]:
        """(card, count, resource key) the device plugin gave the pod, or ("", 0, "")."""
        from skyd.clouds.kubernetes.labels import node_gpus

        name = p["spec"].get("nodeName") or ""
        node = self.nodes.get(name)
        want = self._requests(p)
        for g in node_gpus(node) if node else []:
            if want.get(g.key):
                return self.cards.get(name, g.accelerator), int(want[g.key]), g.key
        return "", 0, ""

    def _gpu_env(self, p: dict[str, Any], env: dict[str, str]) -> None:
        """The container's GPU tools on its PATH, as its image and the node's card make them."""
        from tests.fakes.gpuprofile import CARDS, profile

        card, n, key = self._visible_gpus(p)
        if not n:
            return
        if card not in CARDS:  # a card the profiles do not print: the agent's fake GPUs
            env["SKYD_FAKE_GPUS"] = f"{card}:{n}"
            return
        image = str(p["spec"]["containers"][0]["image"]).lower()
        d = self.root / "gpus" / p["metadata"]["uid"]
        tools = profile(d, card, n, rocm="rocm" in image, cuda=key.startswith("nvidia.com/"))
        if isinstance(tools, dict):
            for tool, data in tools.items():
                script = d / "bin" / tool
                script.parent.mkdir(parents=True, exist_ok=True)
                script.write_text(f"#!/bin/sh\ncat {data}\n")
                script.chmod(0o755)
            env["PATH"] = f"{d / 'bin'}:{env['PATH']}"

    # -- exec -----------------------------------------------------------------------------

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        ns, name = request.match_info["ns"], request.match_info["name"]
        p = self.pods.get((ns, name))
        if p is None:
            return refusal(404, "NotFound", f'pods "{name}" not found')
        if p["status"].get("phase") != "Running":
            return refusal(400, "BadRequest", f"container {p['spec']['containers'][0]['name']} is not running")
        argv = request.query.getall("command", [])
        ws = web.WebSocketResponse(protocols=self.protocols, max_msg_size=0)
        await ws.prepare(request)
        self.exec_calls += 1
        v5 = ws.ws_protocol == "v5.channel.k8s.io"
        box = self.sandbox(p)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(box),
               "SKYD_FAKE_POD": p["metadata"]["uid"], "HOSTNAME": name, **self._container_env(p)}
        self._gpu_env(p, env)  # what the device plugin and the image make visible
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=box, env=env, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except OSError as e:
            await ws.send_bytes(b"\x03" + json.dumps({"status": "Failure", "message": str(e)}).encode())
            await ws.close()
            return ws
        self._procs.add(proc)

        async def pump(stream: asyncio.StreamReader, ch: int) -> None:
            while True:
                data = await stream.read(65536)
                if not data:
                    return
                with contextlib.suppress(Exception):
                    await ws.send_bytes(bytes([ch]) + data)

        async def feed() -> None:
            assert proc.stdin is not None
            async for msg in ws:
                if msg.type != WSMsgType.BINARY or not msg.data:
                    continue
                ch, data = msg.data[0], msg.data[1:]
                if ch == 0:
                    with contextlib.suppress(Exception):
                        proc.stdin.write(data)
                        await proc.stdin.drain()
                elif ch == 255 and v5:
                    proc.stdin.close()
            # the client went away: end the command (a relay, an abandoned exec)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

        assert proc.stdout is not None and proc.stderr is not None
        feeder = asyncio.ensure_future(feed())
        try:
            await asyncio.gather(pump(proc.stdout, 1), pump(proc.stderr, 2))
            code = await proc.wait()
            status: dict[str, Any] = {"metadata": {}, "status": "Success"} if code == 0 else {
                "metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                "message": f"command terminated with non-zero exit code: exit status {code}",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code if code >= 0 else 128 - code)}]}}
            with contextlib.suppress(Exception):
                await ws.send_bytes(b"\x03" + json.dumps(status).encode())
                await ws.close()
        finally:
            feeder.cancel()
            self._procs.discard(proc)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        return ws
