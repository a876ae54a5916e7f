"""Kubeconfig contexts (the regions of the ``kubernetes`` infra) and skyd's settings.

The kubeconfig is ``$KUBECONFIG`` (its first entry) or ``~/.kube/config``. skyd's
``config.yaml`` section ``kubernetes:`` may set:

- ``allowed_contexts``: the contexts skyd uses (default: every context in the kubeconfig);
- ``namespace``: the namespace when the context names none (default ``default``);
- ``pending_timeout_s``: how long a pod pending for capacity (which an autoscaler may add)
  is waited for before the context is given up (default 300; ``$SKYD_K8S_PENDING_TIMEOUT_S``);
- ``autoscaler``: true when the clusters add nodes on demand: pods that no node could hold
  today are then waited for too (default false);
- ``image``, ``image_amd``: the default images (CUDA-capable / ROCm);
- ``allow_spot``: offer spot where nodes are labelled spot/preemptible (default true); a spot
  task's pods then land only on such nodes and tolerate their taints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyd import settings as knobs

DEFAULT_IMAGE = "nvidia/cuda:12.4.1-runtime-ubuntu22.04"
DEFAULT_IMAGE_AMD = "rocm/dev-ubuntu-22.04:6.2"
DEFAULT_IMAGE_CPU = "python:3.11-slim"
DEFAULT_PENDING_S = 300.0


def kubeconfig_path() -> Path:
    raw = os.environ.get("KUBECONFIG", "")
    first = raw.split(os.pathsep)[0] if raw else ""
    return Path(first).expanduser() if first else Path.home() / ".kube" / "config"


def settings() -> dict[str, Any]:
    """The ``kubernetes:`` section of skyd's config.yaml (empty when absent)."""
    from skyd.clouds.settings import section

    return section("kubernetes")


@dataclass(frozen=True)
class Context:
    name: str
    namespace: str
    server: str


def load_contexts() -> tuple[list[Context], str | None]:
    """(contexts skyd may use, the error when the kubeconfig cannot be read)."""
    p = kubeconfig_path()
    try:
        import yaml

        doc = yaml.safe_load(p.read_text()) or {}
    except FileNotFoundError:
        return [], f"no kubeconfig at {p}"
    except (OSError, ValueError) as e:
        return [], f"kubeconfig {p} unreadable: {e}"
    conf = settings()
    clusters = {c.get("name"): (c.get("cluster") or {}) for c in doc.get("clusters") or []
                if isinstance(c, dict)}
    allowed = conf.get("allowed_contexts")
    out = []
    for c in doc.get("contexts") or []:
        if not isinstance(c, dict) or not c.get("name"):
            continue
        name = str(c["name"])
        if isinstance(allowed, list) and name not in allowed:
            continue
        body = c.get("context") or {}
        ns = str(body.get("namespace") or conf.get("namespace") or "default")
        server = str(clusters.get(body.get("cluster"), {}).get("server") or "")
        out.append(Context(name, ns, server))
    return out, None


def pending_timeout_s() -> float:
    override = knobs.K8S_PENDING_TIMEOUT_S.get()
    if override is not None:
        return override
    conf = settings()
    # SkyPilot's kubernetes.provision_timeout (seconds a pod may wait to be scheduled)
    return float(conf.get("pending_timeout_s") or conf.get("provision_timeout") or DEFAULT_PENDING_S)


#: SkyPilot's kubernetes.ports mode -> the Service type skyd makes for a task's ports.
PORTS_MODES = {"loadbalancer": "LoadBalancer", "podip": "ClusterIP"}


def service_type(conf: dict[str, Any]) -> str:
    """skyd's ``ports_service_type``, else SkyPilot's ``ports`` mode (``ingress`` is not
    offered: it needs an ingress controller skyd does not manage; ClusterIP then)."""
    if conf.get("ports_service_type"):
        return str(conf["ports_service_type"])
    return PORTS_MODES.get(str(conf.get("ports") or "").lower(), "ClusterIP")


def with_pod_config(manifest: dict[str, Any], conf: dict[str, Any]) -> dict[str, Any]:
    """SkyPilot's ``kubernetes.pod_config`` merged into a pod manifest the way SkyPilot
    merges it into its own template (named lists by name, a container without a name into
    the first container)."""
    pod_config = conf.get("pod_config")
    if not pod_config:
        return manifest
    import copy

    from skyd.config.layers import merge_k8s

    out = copy.deepcopy(manifest)
    merge_k8s(out, copy.deepcopy(pod_config))
    return out
