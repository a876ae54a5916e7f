"""KubeProvisioner: a cluster is one pod per node plus a headless service (and a Service
for ``ports``), all labelled ``skyd-cluster=<tag>``; node agents run in the pods, deployed
with ``agent_deploy`` over the ``kube`` transport (see docs/kubernetes.md)."""

from __future__ import annotations

import posixpath
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from skyd import settings as knobs
from skyd.clouds.base import (
    NODE_PENDING,
    NODE_PREEMPTED,
    NODE_RUNNING,
    NODE_TERMINATED,
    NODE_UNKNOWN,
    USER_LABEL,
    ClusterHandle,
    LogFn,
    NodeHandle,
    PartialHandle,
    Provisioner,
    ProvisionRequest,
)
from skyd.clouds.kubernetes import config, pods
from skyd.clouds.kubernetes import inventory as inv
from skyd.clouds.kubernetes.api import ContextAPI, KubeAPIError, KubeUnreachable
from skyd.clouds.kubernetes.labels import AMD_KEY, NVIDIA_KEY
from skyd.errors import CredentialsError, InvalidSpecError, ResourcesUnavailableError, SkydError
from skyd.transports import agent_deploy
from skyd.transports.agent_deploy import AgentSite, agent_zipapp, gather
from skyd.transports.kube import KubeExecError, KubeTransport

NAME = "kubernetes"
PYTHON_WAIT_S = 180.0


def _poll_s() -> float:
    return knobs.K8S_POLL_S.get()


def parse_shape(instance_type: str) -> tuple[float, float]:
    """``4CPU--16GB[--H100:1]`` -> (4.0, 16.0)."""
    parts = instance_type.split("--")
    try:
        return float(parts[0].removesuffix("CPU")), float(parts[1].removesuffix("GB"))
    except (IndexError, ValueError):
        return 1.0, 2.0


class KubeProvisioner(Provisioner):
    def __init__(self) -> None:
        self._apis: dict[str, ContextAPI] = {}
        self._transports: dict[tuple[str, str, str], KubeTransport] = {}
        self._zipapp: tuple[Path, str] | None = None

    # -- clients ---------------------------------------------------------------------------

    def api(self, context: str) -> ContextAPI:
        if context not in self._apis:
            ctxs, err = config.load_contexts()
            found = [c for c in ctxs if c.name == context]
            if not found:
                names = ", ".join(c.name for c in ctxs) or "none"
                raise InvalidSpecError(f"unknown kubernetes context {context!r}" + (f" ({err})" if err else ""),
                                       field="resources.infra", hint=f"contexts in the kubeconfig: {names}")
            self._apis[context] = ContextAPI(context, found[0].namespace)
        return self._apis[context]

    async def transport(self, context: str, namespace: str, pod: str) -> KubeTransport:
        key = (context, namespace, pod)
        t = self._transports.get(key)
        if t is None:
            conn = await self.api(context).exec_conn()
            t = self._transports[key] = KubeTransport(conn, namespace, pod, pods.CONTAINER)
        return t

    async def inventory(self, context: str) -> list[inv.Node]:
        api = self.api(context)
        nodes = await api.call("list_node")
        held = await api.call("list_pod_for_all_namespaces", field_selector="status.phase!=Succeeded,status.phase!=Failed")
        return inv.build(nodes, held)

    # -- provision -------------------------------------------------------------------------

    async def provision(self, req: ProvisionRequest, log: LogFn) -> ClusterHandle:
        off, tag = req.offering, req.cluster_tag
        ctx = off.region
        where = f"kubernetes/{ctx}"
        try:
            return await self._provision(req, log, ctx, where)
        except KubeAPIError as e:
            raise self._classify(e, where) from None
        except (KubeUnreachable, CredentialsError) as e:
            raise ResourcesUnavailableError(f"{where}: {e.message}", scope="region") from None
        except KubeExecError as e:
            raise ResourcesUnavailableError(f"{where}: {e.message}", scope="region",
                                            provider_message=f"cluster {tag}") from None

    @staticmethod
    def _classify(e: KubeAPIError, where: str) -> ResourcesUnavailableError:
        pm = f"{e.status} {e.body.get('reason') or e.reason}: {e.api_message}"
        if e.status in (401, 403):
            return ResourcesUnavailableError(f"{where}: the API server refused skyd ({e.api_message})",
                                             scope="region", provider_message=pm,
                                             hint="grant the context's user pods/services/exec in the namespace")
        if e.status == 422:
            return ResourcesUnavailableError(f"{where}: the pod spec was refused: {e.api_message}",
                                             scope="stop", provider_message=pm)
        return ResourcesUnavailableError(f"{where}: {e.api_message}", scope="region", provider_message=pm)

    async def _provision(self, req: ProvisionRequest, log: LogFn, ctx: str, where: str) -> ClusterHandle:
        off, tag = req.offering, req.cluster_tag
        api = self.api(ctx)
        ns = api.namespace
        conf = await anyio.to_thread.run_sync(config.settings)
        nodes = await self.inventory(ctx)
        cpus, mem = parse_shape(off.instance_type)
        gpu_key: str | None = None
        gpus = int(off.accelerator_count or 0)
        terms: list[dict[str, Any]] = []
        if off.accelerator:
            keys = {g.key for n in nodes for g in n.gpus if g.accelerator == off.accelerator}
            if not keys:
                raise ResourcesUnavailableError(f"{where}: no node has {off.accelerator}", scope="region")
            gpu_key = NVIDIA_KEY if NVIDIA_KEY in keys else AMD_KEY
            terms = pods.affinity_terms(nodes, off.accelerator)
        image = pods.image_for(req.image_id, gpu_key, conf)
        svc = pods.dns_name(tag)
        await self._create(api, "create_namespaced_service", ns, pods.headless_service(svc, tag, ns))
        if req.ports:
            await self._create(api, "create_namespaced_service", ns, pods.ports_service(
                f"{svc}-ports", tag, ns, list(req.ports), config.service_type(conf)))
        names = [pods.pod_name(tag, r) for r in range(req.num_nodes)]
        for r, name in enumerate(names):
            await self._create(api, "create_namespaced_pod", ns, config.with_pod_config(pods.pod_manifest(
                name=name, tag=tag, rank=r, namespace=ns, image=image, cpus=cpus, memory_gib=mem,
                gpu_key=gpu_key, gpus=gpus, terms=terms, spot=req.use_spot, labels=_labels(req), service=svc),
                conf))
        log(f"Created {len(names)} pod(s) in {ctx}/{ns} ({off.instance_type}, image {image})")
        running = await self._wait_running(api, tag, names, where, nodes, cpus, mem, gpu_key, gpus,
                                           off.accelerator, bool(conf.get("autoscaler")))
        zipapp = await self._zip()
        hnodes = [self._node(ctx, ns, r, running[n], req.num_nodes) for r, n in enumerate(names)]
        await gather([(self._deploy, n, req.cluster_name, req.token, zipapp, log) for n in hnodes])
        return ClusterHandle(
            cluster_name=req.cluster_name, cloud=NAME, region=ctx, zone=None,
            instance_type=off.instance_type, use_spot=req.use_spot,
            accelerators={off.accelerator: off.accelerator_count} if off.accelerator else {},
            num_nodes=req.num_nodes, hourly_cost=0.0, nodes=hnodes, token=req.token, cpus=cpus,
            memory_gib=mem, tag=tag,
            extra={"namespace": ns, "context": ctx, "image": image, "service": svc,
                   "gpu_key": gpu_key, "ports": list(req.ports)})

    @staticmethod
    async def _create(api: ContextAPI, method: str, ns: str, body: dict[str, Any]) -> None:
        try:
            await api.call(method, ns, body)
        except KubeAPIError as e:
            if e.status != 409:  # found again (a resumed attempt)
                raise

    async def _list(self, api: ContextAPI, tag: str) -> dict[str, dict[str, Any]]:
        got = await api.call("list_namespaced_pod", api.namespace, label_selector=pods.selector(tag))
        return {p["metadata"]["name"]: p for p in got.get("items") or []}

    async def _wait_running(self, api: ContextAPI, tag: str, names: list[str], where: str,
                            nodes: list[inv.Node], cpus: float, mem: float, gpu_key: str | None,
                            gpus: int, accelerator: str | None, autoscaler: bool) -> dict[str, dict[str, Any]]:
        """Until every pod runs. A pod that can never be scheduled fails the context at once
        (the scheduler's reason); one waiting for capacity waits up to pending_timeout_s."""
        bound = config.pending_timeout_s()
        since: float | None = None
        fits = pods.could_ever_fit(nodes, cpus, mem, gpu_key, gpus, accelerator)
        while True:
            have = await self._list(api, tag)
            for n in names:
                p = have.get(n)
                if p is None:
                    raise ResourcesUnavailableError(f"{where}: pod {n} was deleted while starting",
                                                    scope="region")
                st = p.get("status") or {}
                if st.get("phase") in ("Failed", "Succeeded"):
                    why = st.get("reason") or st.get("message") or st.get("phase")
                    raise ResourcesUnavailableError(f"{where}: pod {n} ended while starting ({why})",
                                                    scope="region", provider_message=str(why))
                pull = pods.pull_error(p)
                if pull:
                    raise ResourcesUnavailableError(
                        f"{where}: the image cannot be pulled ({pull})", scope="stop", provider_message=pull,
                        hint="check resources.image_id (the name, the tag, registry credentials)")
                msg = pods.unschedulable_message(p)
                if msg:
                    never = (pods.permanent(msg) or not fits) and not autoscaler
                    if never:
                        raise ResourcesUnavailableError(f"{where}: pod {n} cannot be scheduled: {msg}",
                                                        scope="region", provider_message=msg)
                    since = since or time.monotonic()
                    if time.monotonic() - since > bound:
                        raise ResourcesUnavailableError(
                            f"{where}: pod {n} pending for capacity over {bound:g} s: {msg}",
                            scope="region", provider_message=msg)
            if all((have[n].get("status") or {}).get("phase") == "Running"
                   and (have[n].get("status") or {}).get("podIP") for n in names):
                return have
            await anyio.sleep(_poll_s())

    async def _zip(self) -> tuple[Path, str]:
        if self._zipapp is None:
            self._zipapp = await agent_zipapp()
        return self._zipapp

    @staticmethod
    def _node(ctx: str, ns: str, rank: int, pod: dict[str, Any], num_nodes: int) -> NodeHandle:
        ip = str(pod["status"]["podIP"])
        return NodeHandle(rank=rank, instance_id=pod["metadata"]["name"], internal_ip=ip,
                          extra={"context": ctx, "namespace": ns,
                                 "listen_host": "127.0.0.1" if num_nodes == 1 else ip,
                                 "k8s_node": (pod.get("spec") or {}).get("nodeName")})

    @staticmethod
    def _site(node: NodeHandle, cluster: str) -> AgentSite:
        x = node.extra
        return AgentSite(node_dir=node.node_dir, base=str(x.get("base") or ""), rank=node.rank,
                         cluster=cluster, listen_host=str(x.get("listen_host") or "127.0.0.1"),
                         port=node.agent_port, socket=x.get("agent_socket") or None, sha=str(x.get("sha") or ""))

    async def _t(self, node: NodeHandle) -> KubeTransport:
        return await self.transport(str(node.extra["context"]), str(node.extra["namespace"]), node.instance_id)

    async def _deploy(self, node: NodeHandle, cluster: str, token: str, zipapp: tuple[Path, str],
                      log: LogFn) -> None:
        t = await self._t(node)
        probe = 'command -v python3 >/dev/null && printf %s "$HOME"'  # python3 may be installing
        res = None
        with anyio.move_on_after(PYTHON_WAIT_S):
            while not (res := await t.run(probe, idempotent=True, timeout=30)).ok:
                await anyio.sleep(2.0)
        if res is None or not res.ok:
            raise ResourcesUnavailableError(
                f"pod {node.instance_id}: the image has no python3 and it could not be installed",
                scope="stop", hint="use an image with python3 (resources.image_id)")
        home = res.stdout.strip()
        base = posixpath.join(home or "/tmp", ".skyd")
        node.node_dir = posixpath.join(base, "nodes", f"{cluster}-{node.rank}")
        node.extra.update(home=home, base=base)
        site = self._site(node, cluster)
        try:
            info = await agent_deploy.start(t, site, token, zipapp)
        except ResourcesUnavailableError:
            raise
        except SkydError as e:
            raise ResourcesUnavailableError(f"pod {node.instance_id}: {e.message}", scope="region") from None
        self._record(node, site, info)
        log(f"Node {node.rank} (pod {node.instance_id}): agent {info.get('state')}")

    @staticmethod
    def _record(node: NodeHandle, site: AgentSite, info: dict[str, Any] | None) -> None:
        node.agent_port = site.port
        node.extra.update(sha=site.sha, agent_socket=site.socket)
        if info is not None:
            node.extra["agent_state"] = info.get("state")

    # -- lifecycle -------------------------------------------------------------------------

    async def query(self, handle: ClusterHandle) -> list[str]:
        have = await self._list(self.api(str(handle.region)), handle.cluster_tag)
        out = []
        for n in handle.nodes:
            p = have.get(n.instance_id)
            st = (p or {}).get("status") or {}
            if p is None or st.get("reason") == "Evicted" or (p.get("metadata") or {}).get("deletionTimestamp"):
                out.append(NODE_PREEMPTED)
            elif st.get("phase") == "Running":
                out.append(NODE_RUNNING)
            elif st.get("phase") == "Pending":
                out.append(NODE_PENDING)
            elif st.get("phase") in ("Failed", "Succeeded"):
                out.append(NODE_TERMINATED)
            else:
                out.append(NODE_UNKNOWN)
        if out and all(x == NODE_PREEMPTED for x in out):
            # every pod evicted or deleted: the cluster is gone, so is what only it used
            await self._remove(str(handle.region), handle.cluster_tag)
        return out

    async def stop(self, handle: ClusterHandle, log: LogFn) -> None:
        raise InvalidSpecError("kubernetes clusters cannot be stopped (a pod has no stopped state)",
                               field="cluster", hint=f"skyd down {handle.cluster_name}")

    async def start(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        return await self.ensure_agents(handle, log)

    async def ensure_agents(self, handle: ClusterHandle, log: LogFn) -> ClusterHandle:
        zipapp = await self._zip()
        sites = [(await self._t(n), self._site(n, handle.cluster_name)) for n in handle.nodes]
        await agent_deploy.ensure(sites, handle.token, zipapp, log, cluster=handle.cluster_name)
        for n, (_, s) in zip(handle.nodes, sites, strict=True):
            self._record(n, s, None)
        return handle

    async def terminate(self, handle: ClusterHandle, log: LogFn) -> None:
        n = await self._remove(str(handle.region), handle.cluster_tag)
        log(f"Deleted {n} object(s) labelled {pods.selector(handle.cluster_tag)} in {handle.region}")

    async def forget(self, partial: PartialHandle) -> None:
        if partial.region:
            try:
                await self._remove(partial.region, partial.tag)
            except InvalidSpecError:
                return  # the context is gone from the kubeconfig: nothing skyd can reach

    async def _remove(self, ctx: str, tag: str) -> int:
        """Delete every pod and service labelled with the tag. Idempotent."""
        api = self.api(ctx)
        ns, sel = api.namespace, pods.selector(tag)
        for key in [k for k in self._transports if k[0] == ctx and k[2].startswith(pods.dns_name(tag) + "-")]:
            await self._transports.pop(key).close()
        got_p = await api.call("list_namespaced_pod", ns, label_selector=sel)
        got_s = await api.call("list_namespaced_service", ns, label_selector=sel)
        calls: list[tuple[Any, ...]] = []
        for p in got_p.get("items") or []:
            calls.append((self._delete, api, "delete_namespaced_pod", p["metadata"]["name"], ns))
        for s in got_s.get("items") or []:
            calls.append((self._delete, api, "delete_namespaced_service", s["metadata"]["name"], ns))
        await gather(calls)
        return len(calls)

    @staticmethod
    async def _delete(api: ContextAPI, method: str, name: str, ns: str) -> None:
        try:
            await api.call(method, name, ns, grace_period_seconds=0)
        except KubeAPIError as e:
            if e.status != 404:
                raise

    async def leaked(self, ctx: str, known_tags: set[str]) -> list[str]:
        """Cluster labels on this install's pods/services in the context's namespace that
        no cluster row knows."""
        api = self.api(ctx)
        sel = f"{pods.MANAGED_LABEL}=true,{pods.OWNER_LABEL}={pods.owner_id()}"
        tags: set[str] = set()
        for m in ("list_namespaced_pod", "list_namespaced_service"):
            got = await api.call(m, api.namespace, label_selector=sel)
            tags |= {str(i["metadata"]["labels"].get(pods.TAG_LABEL)) for i in got.get("items") or []}
        known = {pods.label_value(t) for t in known_tags}
        return sorted(t for t in tags if t not in known)

    async def sweep_orphans(self, known_tags: set[str]) -> list[str]:
        """The leak pass for objects with no cluster row at all: on every reachable context,
        remove this install's labelled objects whose tag no row carries. Returns
        ``context/tag`` of what was removed; an unreachable context is skipped."""
        ctxs, _ = await anyio.to_thread.run_sync(config.load_contexts)
        out: list[str] = []
        for c in ctxs:
            try:
                with anyio.fail_after(20):
                    for tag in await self.leaked(c.name, known_tags):
                        await self._remove(c.name, tag)
                        out.append(f"{c.name}/{tag}")
            except (SkydError, TimeoutError):
                continue
        return out

    async def open_ports(self, handle: ClusterHandle, ports: Sequence[str]) -> None:
        api = self.api(str(handle.region))
        conf = await anyio.to_thread.run_sync(config.settings)
        svc = f"{pods.dns_name(handle.cluster_tag)}-ports"
        have = list(handle.extra.get("ports") or [])
        want = sorted(set(have) | set(ports))
        await self._delete(api, "delete_namespaced_service", svc, api.namespace)
        await self._create(api, "create_namespaced_service", api.namespace, pods.ports_service(
            svc, handle.cluster_tag, api.namespace, want, config.service_type(conf)))
        handle.extra["ports"] = want

    async def agent_endpoint(self, handle: ClusterHandle, rank: int) -> tuple[str, int]:
        node = handle.nodes[rank]
        t = await self._t(node)
        return await t.agent_endpoint(self._site(node, handle.cluster_name).address())

    async def sync_dir(self, handle: ClusterHandle, rank: int, src: str, dst: str,
                       excludes: list[str]) -> tuple[int, int]:
        node = handle.nodes[rank]
        if not posixpath.isabs(dst):
            dst = posixpath.join(node.node_dir, dst)
        t = await self._t(node)
        return await t.put_tree(src.rstrip("/") if src.endswith("/") else src, dst, excludes)

    async def close(self) -> None:
        for t in self._transports.values():
            await t.close()
        self._transports.clear()
        for a in self._apis.values():
            await a.close()
        self._apis.clear()


__all__ = ["KubeProvisioner", "parse_shape"]


def _labels(req: ProvisionRequest) -> tuple[tuple[str, str], ...]:
    """The pod labels of the task, and skypilot-user as a valid label value."""
    return tuple((k, pods.label_value(v) if k == USER_LABEL else v) for k, v in req.tags())
