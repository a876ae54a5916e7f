"""Volumes on Kubernetes (SkyPilot's ``sky volumes``): PersistentVolumeClaims that skyd
creates from a volume YAML, lists and deletes. The PVC's labels are the record (no other
state): ``skyd-volume=<name>`` plus skyd's owner label; a PVC skyd did not create is never
deleted (``use_existing: true`` registers one by labelling it, and delete then only
removes the labels).

Volume YAML (SkyPilot's schema)::

    name: data
    type: k8s-pvc
    infra: k8s/my-context        # k8s: the first allowed context
    size: 10Gi
    labels: {team: ml}
    use_existing: false
    config:
      namespace: default         # default: the context's (or kubernetes.namespace)
      storage_class_name: fast
      access_mode: ReadWriteMany # default ReadWriteOnce
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skyd.errors import InvalidSpecError, NotFoundError

VOLUME_LABEL = "skyd-volume"
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")


class VolumeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    namespace: str | None = None
    storage_class_name: str | None = None
    access_mode: str = "ReadWriteOnce"


class VolumeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    type: str = "k8s-pvc"
    infra: str = "k8s"
    size: str | int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    use_existing: bool = False
    config: VolumeConfig = Field(default_factory=VolumeConfig)


def parse(doc: Any) -> VolumeSpec:
    """A volume YAML mapping -> VolumeSpec; mistakes name the field."""
    if not isinstance(doc, dict):
        raise InvalidSpecError("a volume YAML is a mapping", hint="see `skyd volumes apply --help`")
    try:
        spec = VolumeSpec.model_validate(doc)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        raise InvalidSpecError(msg, field=field, hint="see the volume YAML in docs/volumes.md") from None
    if spec.type != "k8s-pvc":
        raise InvalidSpecError(f"volume type {spec.type!r} is not offered by skyd", field="type",
                               hint="type: k8s-pvc (a PersistentVolumeClaim on Kubernetes)")
    if spec.infra.split("/")[0] not in ("k8s", "kubernetes"):
        raise InvalidSpecError(f"infra {spec.infra!r}: volumes live on Kubernetes", field="infra",
                               hint="infra: k8s or k8s/<context>")
    if not _NAME.match(spec.name):
        raise InvalidSpecError(f"volume name {spec.name!r} is not a valid PVC name", field="name",
                               hint="lowercase letters, digits and '-', at most 63 characters")
    if spec.config.access_mode not in ACCESS_MODES:
        raise InvalidSpecError(f"access_mode {spec.config.access_mode!r}", field="config.access_mode",
                               hint="one of " + ", ".join(ACCESS_MODES))
    if not spec.use_existing:
        size = str(spec.size) + ("Gi" if isinstance(spec.size, int) else "") if spec.size is not None else ""
        if not _SIZE.match(size):
            raise InvalidSpecError(f"size {spec.size!r}", field="size",
                                   hint="a quantity such as 10Gi (a bare number is GiB)")
    return spec


def size_of(spec: VolumeSpec) -> str:
    return f"{spec.size}Gi" if isinstance(spec.size, int) else str(spec.size)


def context_of(infra: str, contexts: list[str]) -> str:
    _, _, ctx = infra.partition("/")
    if ctx:
        if ctx not in contexts:
            raise InvalidSpecError(f"unknown kubernetes context {ctx!r}", field="infra",
                                   hint="contexts: " + (", ".join(contexts) or "none"))
        return ctx
    if not contexts:
        raise InvalidSpecError("no kubernetes context is available", field="infra",
                               hint="add one to your kubeconfig (or kubernetes.allowed_contexts)")
    return contexts[0]


def pvc_body(spec: VolumeSpec, namespace: str, owner: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": spec.name, "namespace": namespace,
                     "labels": {**spec.labels, VOLUME_LABEL: spec.name, "skyd-owner": owner}},
        "spec": {"accessModes": [spec.config.access_mode],
                 "resources": {"requests": {"storage": size_of(spec)}}},
    }
    if spec.config.storage_class_name:
        body["spec"]["storageClassName"] = spec.config.storage_class_name
    return body


def row_of(context: str, pvc: dict[str, Any]) -> dict[str, Any]:
    md, sp, st = pvc.get("metadata") or {}, pvc.get("spec") or {}, pvc.get("status") or {}
    return {"name": md.get("name"), "infra": f"k8s/{context}", "namespace": md.get("namespace"),
            "type": "k8s-pvc",
            "size": ((sp.get("resources") or {}).get("requests") or {}).get("storage"),
            "access_mode": ",".join(sp.get("accessModes") or []),
            "storage_class": sp.get("storageClassName"), "status": st.get("phase") or "Pending",
            "created": md.get("creationTimestamp")}


async def apply(api: Any, spec: VolumeSpec, owner: str) -> dict[str, Any]:
    """Create the PVC (or, ``use_existing``, label the one there); idempotent by name."""
    from skyd.clouds.kubernetes.api import KubeAPIError

    ns = spec.config.namespace or api.namespace
    if spec.use_existing:
        try:
            pvc = await api.call("read_namespaced_persistent_volume_claim", spec.name, ns)
        except KubeAPIError as e:
            if e.status == 404:
                raise NotFoundError(f"no PVC {spec.name!r} in {api.context}/{ns}", field="name",
                                    hint="create it, or drop use_existing to let skyd create it") from None
            raise
        patch = {"metadata": {"labels": {VOLUME_LABEL: spec.name, "skyd-existing": "true"}}}
        pvc = await api.call("patch_namespaced_persistent_volume_claim", spec.name, ns, patch)
        return row_of(api.context, pvc)
    try:
        pvc = await api.call("create_namespaced_persistent_volume_claim", ns, pvc_body(spec, ns, owner))
    except KubeAPIError as e:
        if e.status != 409:
            raise InvalidSpecError(f"the PVC was refused: {e.api_message}", field="volume") from None
        pvc = await api.call("read_namespaced_persistent_volume_claim", spec.name, ns)
        if (pvc.get("metadata", {}).get("labels") or {}).get(VOLUME_LABEL) != spec.name:
            raise InvalidSpecError(f"a PVC named {spec.name!r} exists in {api.context}/{ns} and is "
                                   "not skyd's", field="name",
                                   hint="pick another name, or use_existing: true") from None
    return row_of(api.context, pvc)


async def ls(api: Any) -> list[dict[str, Any]]:
    out = await api.call("list_namespaced_persistent_volume_claim", api.namespace,
                         label_selector=VOLUME_LABEL)
    return [row_of(api.context, p) for p in out.get("items") or []]


async def delete(api: Any, row: dict[str, Any]) -> None:
    """Delete a PVC skyd created; for a registered existing one, only skyd's labels go."""
    pvc = await api.call("read_namespaced_persistent_volume_claim", row["name"], row["namespace"])
    labels = pvc.get("metadata", {}).get("labels") or {}
    if labels.get("skyd-existing") == "true":
        patch = {"metadata": {"labels": {VOLUME_LABEL: None, "skyd-existing": None}}}
        await api.call("patch_namespaced_persistent_volume_claim", row["name"], row["namespace"], patch)
        return
    await api.call("delete_namespaced_persistent_volume_claim", row["name"], row["namespace"])
