"""Request bodies checked against a provider's published, machine-readable description.

A fake states its source in one line and validates every body it receives:

    COMPUTE = Spec.discovery(path_of_compute_v1_json)          # Google discovery document
    HOTAISLE = Spec.swagger(tests/data/hotaisle/swagger.json)  # Swagger 2.0 / OpenAPI 3
    KUBE = Spec.kubernetes(kubernetes_asyncio.client.models)   # a client's generated models

    errors = COMPUTE.check(body, "Instance")   # [] or ["instance.scheduling.foo: unknown field", ...]

What is checked (the subset of JSON Schema these documents use): ``$ref`` (a discovery
schema name, ``#/definitions/X`` or ``#/components/schemas/X``), ``type`` (object, array,
string, integer, number, boolean; discovery's int64/uint64 are strings of digits),
``properties`` with unknown fields refused (Google's APIs answer 400 "Unknown name ... Cannot
find field"; pass ``unknown_ok=True`` for a service documented to ignore them),
``additionalProperties`` (maps), ``items``, ``enum``, ``pattern``, ``required`` (and
discovery's per-method ``annotations.required``) and ``x-nullable`` /
``nullable``. Anything else a spec says (cross-field rules written in prose) is the fake's own
code, next to the call that reads the spec.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_INT = re.compile(r"^-?\d+$")


@dataclass
class Spec:
    schemas: dict[str, Any]
    source: str  # what the schemas came from (shown in the fake's 400 answers)
    version: str = ""
    unknown_ok: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    _method: str = field(default="", repr=False)

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def discovery(cls, path: Path | str) -> Spec:
        doc = json.loads(Path(path).read_text())
        return cls(doc["schemas"], source=f"{doc.get('name')} {doc.get('version')} discovery document",
                   version=str(doc.get("revision") or ""), raw=doc)

    @classmethod
    def kubernetes(cls, models: Any) -> Spec:
        """The generated models of a Kubernetes client (``kubernetes.client.models`` or
        ``kubernetes_asyncio.client.models``): each class's ``openapi_types`` and
        ``attribute_map`` give the JSON field names and types of that API version."""
        version = str(getattr(__import__(models.__name__.split(".")[0]), "__version__", ""))
        return cls(_KubeSchemas(models), source=f"{models.__name__.split('.')[0]} models",
                   version=version)

    @classmethod
    def swagger(cls, path: Path | str, *, unknown_ok: bool = False) -> Spec:
        doc = json.loads(Path(path).read_text())
        schemas = doc.get("definitions") or (doc.get("components") or {}).get("schemas") or {}
        info = doc.get("info") or {}
        return cls(schemas, source=f"{info.get('title', path)} swagger",
                   version=str(info.get("version") or ""), unknown_ok=unknown_ok, raw=doc)

    # -- checking -----------------------------------------------------------------------------

    def check(self, body: Any, schema: str | dict[str, Any], where: str = "",
              method: str = "") -> list[str]:
        """Every way ``body`` breaks ``schema`` (a schema name or a schema object). ``method``
        (a discovery method id, e.g. ``compute.instances.insert``) turns on the fields whose
        ``annotations.required`` names it."""
        out: list[str] = []
        self._method = method
        sch = self._resolve(schema)
        self._check(body, sch, where or (schema if isinstance(schema, str) else "body"), out)
        return out

    def _resolve(self, schema: str | dict[str, Any]) -> dict[str, Any]:
        seen = 0
        while True:
            if isinstance(schema, str):
                name = schema.rsplit("/", 1)[-1]
                if name not in self.schemas:
                    raise KeyError(f"{self.source} has no schema {name!r}")
                schema = self.schemas[name]
            elif "$ref" in schema:
                schema = str(schema["$ref"])
            else:
                return schema
            seen += 1
            assert seen < 50, "a $ref loop"

    def _merged(self, sch: dict[str, Any]) -> dict[str, Any]:
        """One object schema of an ``allOf`` (properties and required of every part)."""
        props: dict[str, Any] = dict(sch.get("properties") or {})
        req: list[str] = list(sch.get("required") or [])
        typ = sch.get("type")
        for part in sch["allOf"]:
            part = self._resolve(part)
            if part.get("allOf"):
                part = self._merged(part)
            props.update(part.get("properties") or {})
            req += list(part.get("required") or [])
            typ = typ or part.get("type")
        out = {k: v for k, v in sch.items() if k != "allOf"}
        return out | {"type": typ or "object", "properties": props, "required": req}

    def _check(self, v: Any, sch: dict[str, Any], path: str, out: list[str]) -> None:
        sch = self._resolve(sch)
        if v is None:
            if not (sch.get("x-nullable") or sch.get("nullable")):
                out.append(f"{path}: null is not allowed")
            return
        if sch.get("allOf"):
            sch = self._merged(sch)
        typ = sch.get("type")
        if typ is None and ("properties" in sch or "additionalProperties" in sch):
            typ = "object"
        if "enum" in sch and v not in sch["enum"]:
            out.append(f"{path}: {v!r} is not one of {sch['enum']}")
            return
        if isinstance(typ, list):  # any of several JSON types (e.g. a quantity: "2" or 2)
            if not any(self.check(v, {"type": t}, path) == [] for t in typ):
                out.append(f"{path}: {v!r} is none of {typ}")
            return
        if typ == "object":
            if not isinstance(v, dict):
                out.append(f"{path}: expected an object, got {type(v).__name__}")
                return
            props: dict[str, Any] = sch.get("properties") or {}
            extra = sch.get("additionalProperties")
            for req in sch.get("required") or []:
                if req not in v:
                    out.append(f"{path}.{req}: required")
            for k, p in props.items():
                if self._method and self._method in ((p.get("annotations") or {}).get("required") or ()) \
                        and k not in v:
                    out.append(f"{path}.{k}: required by {self._method}")
            for k, val in v.items():
                if k in props:
                    self._check(val, props[k], f"{path}.{k}", out)
                elif isinstance(extra, dict):
                    self._check(val, extra, f"{path}.{k}", out)
                elif extra is True or self.unknown_ok or (not props and extra is None):
                    continue
                else:
                    out.append(f"{path}.{k}: unknown field (not in {self.source})")
        elif typ == "array":
            if not isinstance(v, list):
                out.append(f"{path}: expected an array, got {type(v).__name__}")
                return
            for i, item in enumerate(v):
                self._check(item, sch.get("items") or {}, f"{path}[{i}]", out)
        elif typ == "string":
            if not isinstance(v, str):
                out.append(f"{path}: expected a string, got {type(v).__name__} {v!r}")
            elif sch.get("format") in ("int64", "uint64") and not _INT.match(v):
                out.append(f"{path}: {v!r} is not a {sch['format']} string")
            elif sch.get("pattern") and not re.fullmatch(str(sch["pattern"]), v):
                out.append(f"{path}: {v!r} does not match {sch['pattern']}")
        elif typ == "integer":
            if isinstance(v, bool) or not isinstance(v, int):
                # discovery documents accept int32 in JSON numbers; swagger's integer the same
                out.append(f"{path}: expected an integer, got {type(v).__name__} {v!r}")
        elif typ == "number":
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                out.append(f"{path}: expected a number, got {type(v).__name__} {v!r}")
        elif typ == "boolean":
            if not isinstance(v, bool):
                out.append(f"{path}: expected a boolean, got {type(v).__name__} {v!r}")


_KUBE_PRIMITIVES: dict[str, dict[str, Any]] = {
    "str": {"type": "string"}, "int": {"type": "integer"}, "float": {"type": "number"},
    "bool": {"type": "boolean"}, "object": {}, "datetime": {"type": "string"},
    "date": {"type": "string"},
}
_KUBE_QUANTITY_MAPS = {("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests")}


class _KubeSchemas(dict[str, Any]):
    """Schemas made on first use from a Kubernetes client's model classes."""

    def __init__(self, models: Any) -> None:
        super().__init__()
        self.models = models

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (dict.__contains__(self, name) or hasattr(self.models, name))

    def __missing__(self, name: str) -> dict[str, Any]:
        cls = getattr(self.models, name)
        props: dict[str, Any] = {}
        for attr, typ in cls.openapi_types.items():
            sch = _kube_type(typ)
            if (name, attr) in _KUBE_QUANTITY_MAPS:  # resource.Quantity: a string or a number
                sch = {"type": "object", "additionalProperties": {"type": ["string", "number"]}}
            props[cls.attribute_map[attr]] = sch
        out = {"type": "object", "properties": props}
        self[name] = out
        return out


def _kube_type(typ: str) -> dict[str, Any]:
    if typ in _KUBE_PRIMITIVES:
        return _KUBE_PRIMITIVES[typ]
    if typ.startswith("list[") and typ.endswith("]"):
        return {"type": "array", "items": _kube_type(typ[5:-1])}
    if typ.startswith("dict(") and typ.endswith(")"):
        return {"type": "object", "additionalProperties": _kube_type(typ[5:-1].split(",", 1)[1].strip())}
    return {"$ref": typ}
