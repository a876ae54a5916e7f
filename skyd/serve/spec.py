"""A service YAML as `serve up` takes it: loaded and checked before anything exists.

The task goes through skyd.models (the same code as `skyd validate`), which rejects
replicas below zero, min > max and a missing target_qps_per_replica. Here: the service
section and its readiness probe path are there, the name fits, the TLS files exist, the
load balancer's port is free.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from skyd.errors import InvalidSpecError

MAX_SERVICE_NAME = 24  # "sv-NAME-ID" stays a valid cluster name
LB_PORT_RANGE = range(30001, 30101)


def _raw_service(text: str | None) -> dict[str, Any] | None:
    import yaml

    if not text:
        return None
    try:
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except yaml.YAMLError:
        return None  # the model loader reports the YAML error
    for d in docs:
        if "service" in d:
            return d["service"] if isinstance(d["service"], dict) else {}
    return None


def load_service(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(service name, {"task": normalized task, "service": service dict}). Runs in a
    worker thread (YAML parsing)."""
    from skyd.names import check_name
    from skyd.pipeline.taskload import load_dag_with_overrides

    dag = load_dag_with_overrides(payload)
    if len(dag.tasks) != 1:
        raise InvalidSpecError(f"this YAML holds {len(dag.tasks)} tasks; a service is one task",
                               field="service")  # fmt: skip
    task = dag.tasks[0]
    from skyd.pipeline.checks import capacity

    capacity([task])  # num_nodes per replica against what the infras can hold
    if task.service is None:
        raise InvalidSpecError("the task has no service: section", field="service",
                               hint="add e.g. service: {readiness_probe: /health, replicas: 2}")
    raw = _raw_service(payload.get("yaml")) or {}
    probe = raw.get("readiness_probe")
    if probe is None or (isinstance(probe, dict) and not probe.get("path")):
        raise InvalidSpecError("service.readiness_probe needs a path", field="service.readiness_probe",
                               hint="e.g. readiness_probe: /health (the replica answers 200 when ready)")
    name = payload.get("name") or task.name
    if not name:
        raise InvalidSpecError("the service needs a name", field="name",
                               hint="skyd serve up TASK.yaml -n NAME (or name: in the YAML)")
    check_name(name, kind="service", field="name")
    if len(name) > MAX_SERVICE_NAME:
        raise InvalidSpecError(f"service name {name!r} is longer than {MAX_SERVICE_NAME} characters",
                               field="name", hint="pick a shorter -n NAME")  # fmt: skip
    svc = task.service.model_dump(mode="json")
    tls = svc.get("tls")
    if tls:
        base = Path(payload.get("base_dir") or ".")
        for k in ("keyfile", "certfile"):
            p = Path(os.path.expanduser(str(tls[k])))
            p = p if p.is_absolute() else base / p
            if not p.is_file():
                raise InvalidSpecError(f"service.tls.{k} {tls[k]!r}: no such file",
                                       field=f"service.tls.{k}", hint="give the path of a PEM file")
            tls[k] = str(p.resolve())
    # secret values travel beside the spec (the stored spec has them redacted); the verb
    # keeps them in a 0600 file that replica launches read (skyd.serve.verbs)
    values = {k: str(v) for k, v in task.secrets.items() if v is not None}
    return str(name), {"task": task.to_normalized(), "service": svc, SECRET_VALUES: values}


SECRET_VALUES = "_secret_values"


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_lb_port(host: str, spec: dict[str, Any], taken: set[int]) -> int:
    """The load balancer's port: ``service.ports`` when the replicas run on this machine
    (each replica then gets a port of its own), else the first free one in 30001-30100."""
    from skyd.serve.manager import ServeManager

    want = spec["service"].get("ports")
    if want and ServeManager.is_local(spec["task"]):
        port = int(want)
        if port in taken or not port_free(host, port):
            raise InvalidSpecError(f"port {port} is already in use on {host}", field="service.ports",
                                   hint="pick another service.ports, or stop what listens there")
        return port
    for port in LB_PORT_RANGE:
        if port not in taken and port_free(host, port):
            return port
    raise InvalidSpecError("no free load-balancer port in 30001-30100", field="service.ports",
                           hint="`skyd serve down` services you no longer need")
