"""What every kind of the fake Kubernetes API server shares (tests/fakes/kubeapi.py): the
Status body of a refusal, label selectors, and a namespaced collection with the list, create,
get and delete handlers the real API server has for a plain kind (services, serviceaccounts,
persistentvolumeclaims)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

Obj = dict[str, Any]


def refusal(code: int, reason: str, message: str) -> web.Response:
    """A refusal as the API server sends it: a v1 Status."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    return web.json_response(body, status=code)


def match_labels(sel: str, labels: dict[str, str]) -> bool:
    """A labelSelector of equality terms (k=v, k==v, k!=v) and existence terms (k)."""
    for part in filter(None, (p.strip() for p in sel.split(","))):
        if "!=" in part:
            k, v = part.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in part:
            k, v = part.split("=", 1)
            if labels.get(k.rstrip("=")) != v:
                return False
        elif part not in labels:
            return False
    return True


class Collection:
    """One plain namespaced kind. ``items`` is the fake's own dict ((namespace, name) -> object);
    ``validate`` refuses a body the published model refuses (a Status) or returns None;
    ``admit`` finishes an accepted object (its status)."""

    def __init__(self, plural: str, list_kind: str, items: dict[tuple[str, str], Obj],
                 validate: Callable[[Any], web.Response | None],
                 admit: Callable[[Obj], None] | None = None) -> None:
        self.plural = plural
        self.list_kind = list_kind
        self.items = items
        self.validate = validate
        self.admit = admit

    def routes(self, r: web.UrlDispatcher, prefix: str, *, verbs: str = "lcgd") -> None:
        """Add the handlers under ``prefix`` (.../namespaces/{ns}/<plural>): l(ist), c(reate),
        g(et), d(elete)."""
        if "l" in verbs:
            r.add_get(prefix, self.list)
        if "c" in verbs:
            r.add_post(prefix, self.create)
        if "g" in verbs:
            r.add_get(prefix + "/{name}", self.get)
        if "d" in verbs:
            r.add_delete(prefix + "/{name}", self.delete)

    def _not_found(self, name: str) -> web.Response:
        return refusal(404, "NotFound", f'{self.plural} "{name}" not found')

    async def list(self, request: web.Request) -> web.Response:
        ns, sel = request.match_info["ns"], request.query.get("labelSelector", "")
        items = [v for (n, _), v in self.items.items()
                 if n == ns and match_labels(sel, v["metadata"].get("labels") or {})]
        return web.json_response({"kind": self.list_kind, "apiVersion": "v1", "metadata": {}, "items": items})

    async def create(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        body = await request.json()
        bad = self.validate(body)
        if bad is not None:
            return bad
        name = body["metadata"]["name"]
        if (ns, name) in self.items:
            return refusal(409, "AlreadyExists", f'{self.plural} "{name}" already exists')
        body["metadata"].update(namespace=ns, uid=str(uuid.uuid4()),
                                creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if self.admit is not None:
            self.admit(body)
        self.items[(ns, name)] = body
        return web.json_response(body, status=201)

    def find(self, request: web.Request) -> Obj | None:
        return self.items.get((request.match_info["ns"], request.match_info["name"]))

    async def get(self, request: web.Request) -> web.Response:
        v = self.find(request)
        return web.json_response(v) if v is not None else self._not_found(request.match_info["name"])

    async def delete(self, request: web.Request) -> web.Response:
        v = self.items.pop((request.match_info["ns"], request.match_info["name"]), None)
        return web.json_response(v) if v is not None else self._not_found(request.match_info["name"])
