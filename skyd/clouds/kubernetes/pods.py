"""Pod and Service manifests of a cluster, and reading pod status (scheduling, pulls).

Every object carries ``skyd-cluster=<tag>`` (plus ``skyd-managed=true``): down and the leak
pass find them by label. Names are DNS-1123 (lower case, ``-``), derived from the tag.
"""

from __future__ import annotations

import re
from typing import Any

from skyd.clouds.kubernetes.inventory import SPOT_LABELS, Node
from skyd.clouds.kubernetes.labels import AMD_DEVICE_ID, AMD_DEVICE_ID_PREFIX, AMD_KEY, NVIDIA_KEY

TAG_LABEL = "skyd-cluster"
MANAGED_LABEL = "skyd-managed"
RANK_LABEL = "skyd-rank"
OWNER_LABEL = "skyd-owner"  # which skyd install made it: the orphan sweep touches only its own
CONTAINER = "skyd"

# Keeps the container alive with nothing running; installs python3 when the image lacks it
# (the node agent and skyd's helper scripts need it).
KEEPALIVE = (
    "command -v python3 >/dev/null 2>&1 || { (apt-get update && apt-get install -y python3) "
    "|| (yum install -y python3) || (apk add --no-cache python3); } >/tmp/skyd-python.log 2>&1; "
    "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"
)


def dns_name(tag: str) -> str:
    s = re.sub(r"[^a-z0-9-]+", "-", tag.lower()).strip("-") or "skyd"
    return s[:50].rstrip("-")


def label_value(tag: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]+", "-", tag)[:63]
    return s.strip("-_.") or "skyd"


def pod_name(tag: str, rank: int) -> str:
    return f"{dns_name(tag)}-{rank}"


def selector(tag: str) -> str:
    return f"{TAG_LABEL}={label_value(tag)}"


def owner_id() -> str:
    """This install's id (host name + SKYD_HOME): two users sharing a namespace never sweep
    each other's clusters."""
    import hashlib
    import socket

    from skyd import paths

    return hashlib.sha256(f"{socket.gethostname()}:{paths.home()}".encode()).hexdigest()[:16]


def base_labels(tag: str, user: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    return {**dict(user), TAG_LABEL: label_value(tag), MANAGED_LABEL: "true", OWNER_LABEL: owner_id()}


def image_for(image_id: str | None, gpu_key: str | None, conf: dict[str, Any]) -> str:
    from skyd.clouds.kubernetes.config import DEFAULT_IMAGE, DEFAULT_IMAGE_AMD, DEFAULT_IMAGE_CPU

    if image_id:
        return image_id[len("docker:"):] if image_id.startswith("docker:") else image_id
    if gpu_key == AMD_KEY:
        return str(conf.get("image_amd") or DEFAULT_IMAGE_AMD)
    if gpu_key == NVIDIA_KEY:
        return str(conf.get("image") or DEFAULT_IMAGE)
    return str(conf.get("image_cpu") or DEFAULT_IMAGE_CPU)


def affinity_terms(nodes: list[Node], accelerator: str) -> list[dict[str, Any]]:
    """Node selector terms (ORed) matching the label each node announced ``accelerator`` by."""
    from skyd.clouds.kubernetes.labels import AMD_PRODUCT, NVIDIA_LABELS

    terms: dict[str, dict[str, Any]] = {}
    for n in nodes:
        if not any(g.accelerator == accelerator for g in n.gpus):
            continue
        expr: dict[str, Any] | None = None
        for k in n.labels:
            if k.startswith(AMD_DEVICE_ID_PREFIX):
                expr = {"key": k, "operator": "Exists"}
                break
        if expr is None:
            for k in (AMD_DEVICE_ID, AMD_PRODUCT, *NVIDIA_LABELS):
                if n.labels.get(k):
                    expr = {"key": k, "operator": "In", "values": [n.labels[k]]}
                    break
        if expr is not None:
            terms[repr(expr)] = {"matchExpressions": [expr]}
    return list(terms.values())


def pod_manifest(*, name: str, tag: str, rank: int, namespace: str, image: str, cpus: float,
                 memory_gib: float, gpu_key: str | None, gpus: int, terms: list[dict[str, Any]],
                 spot: bool, labels: tuple[tuple[str, str], ...], service: str) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": f"{int(cpus * 1000)}m", "memory": f"{int(memory_gib * 1024)}Mi"}
    limits: dict[str, str] = {}
    if gpu_key and gpus:
        requests[gpu_key] = limits[gpu_key] = str(gpus)
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostname": name,
        "subdomain": service,
        "terminationGracePeriodSeconds": 5,
        "containers": [{
            "name": CONTAINER, "image": image, "command": ["/bin/sh", "-c", KEEPALIVE],
            "resources": {"requests": requests, **({"limits": limits} if limits else {})},
        }],
    }
    if spot:  # only nodes labelled spot/preemptible, of the accelerator's label forms
        spot_exprs = [{"key": k, "operator": "In", "values": [v]} for k, v in SPOT_LABELS]
        terms = [{"matchExpressions": [*t["matchExpressions"], e]} for t in terms or [{"matchExpressions": []}]
                 for e in spot_exprs]
    if terms:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    tol: list[dict[str, Any]] = []
    if gpu_key:
        tol.append({"key": gpu_key, "operator": "Exists", "effect": "NoSchedule"})
    if spot:
        tol += [{"key": k, "operator": "Equal", "value": v, "effect": "NoSchedule"} for k, v in SPOT_LABELS]
    if tol:
        spec["tolerations"] = tol
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {**base_labels(tag, labels), RANK_LABEL: str(rank)}},
            "spec": spec}


def headless_service(name: str, tag: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "labels": base_labels(tag)},
            "spec": {"clusterIP": "None", "selector": {TAG_LABEL: label_value(tag)},
                     "publishNotReadyAddresses": True}}


def expand_ports(ports: list[str]) -> list[int]:
    out: list[int] = []
    for p in ports:
        a, _, b = str(p).partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return sorted(set(out))


def ports_service(name: str, tag: str, namespace: str, ports: list[str], kind: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "labels": base_labels(tag)},
            "spec": {"type": kind,
                     "selector": {TAG_LABEL: label_value(tag), RANK_LABEL: "0"},
                     "ports": [{"name": f"p{p}", "port": p, "targetPort": p, "protocol": "TCP"}
                               for p in expand_ports(ports)]}}


# -- reading status -----------------------------------------------------------------------

PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
NEVER_FIT = ("untolerated taint", "didn't match Pod's node affinity/selector",
             "didn't match node selector", "node(s) were unschedulable",
             "didn't match pod affinity", "didn't match pod anti-affinity")


def unschedulable_message(pod: dict[str, Any]) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "Unschedulable")
    return None


def pull_error(pod: dict[str, Any]) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        w = (cs.get("state") or {}).get("waiting") or {}
        if w.get("reason") in PULL_ERRORS:
            msg = str(w.get("message") or "")
            img = cs.get("image") or ""
            return f"{w['reason']}: image {img!r}" + (f": {msg}" if msg else "")
    return None


def could_ever_fit(nodes: list[Node], cpus: float, mem: float, gpu_key: str | None, gpus: int,
                   accelerator: str | None) -> bool:
    """Whether some node, were it empty, could hold the pod (ignoring taints the pod
    tolerates): capacity that others hold now may come back; a shape no node has never will."""
    for n in nodes:
        if n.cpus < cpus or n.memory_gib < mem:
            continue
        if gpu_key and gpus:
            if not any(g.key == gpu_key and g.count >= gpus and (accelerator is None or g.accelerator == accelerator)
                       for g in n.gpus):
                continue
        return True
    return False


def permanent(message: str) -> bool:
    """Every reason the scheduler lists is one no waiting fixes (taints, selectors)."""
    head = message.split(". preemption:")[0]
    _, _, reasons = head.partition(":")
    parts = [p.strip() for p in reasons.split(",") if p.strip()]
    return bool(parts) and all(any(k in p for k in NEVER_FIT) for p in parts)
