"""GET /v1/openapi.json, built from the registries and the pydantic models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

import skyd
from skyd.daemon import api_models as m
from skyd.daemon.registry import READS, VERBS


def _schema(model: type[BaseModel], comps: dict[str, Any]) -> dict[str, str]:
    s = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in s.pop("$defs", {}).items():
        comps.setdefault(name, sub)
    comps[model.__name__] = s
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(ref: dict[str, Any], desc: str = "OK") -> dict[str, Any]:
    return {"description": desc, "content": {"application/json": {"schema": ref}}}


def build_openapi() -> dict[str, Any]:
    comps: dict[str, Any] = {}
    err = _json(_schema(m.ErrorBody, comps), "error")
    ndjson = {"description": "ndjson stream", "content": {"application/x-ndjson": {}}}
    paths: dict[str, dict[str, Any]] = {}
    rid = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"},
            "description": "request id or unique prefix"}]
    paths["/v1/requests"] = {"get": {
        "summary": "List requests", "parameters": [
            {"name": "status", "in": "query", "schema": {"type": "string"}},
            {"name": "verb", "in": "query", "schema": {"type": "string"}},
            {"name": "limit", "in": "query", "schema": {"type": "integer"}}],
        "responses": {"200": _json({"type": "array", "items": _schema(m.RequestRecord, comps)})}}}
    paths["/v1/requests/{id}"] = {
        "get": {"summary": "Get a request", "parameters": rid,
                "responses": {"200": _json(_schema(m.RequestRecord, comps)), "404": err}},
        "delete": {"summary": "Cancel a request", "parameters": rid,
                   "responses": {"200": _json(_schema(m.CancelResponse, comps)), "404": err}}}
    paths["/v1/requests/{id}/events"] = {"get": {
        "summary": "Replay (and with follow=1, follow) a request's events", "parameters": rid + [
            {"name": "follow", "in": "query", "schema": {"type": "integer"}}],
        "responses": {"200": ndjson, "404": err}}}
    for verb in sorted(VERBS.values(), key=lambda v: v.name):
        op: dict[str, Any] = {
            "summary": verb.summary or f"Submit a {verb.name} request",
            "x-resumable": verb.resumable,
            "parameters": [{
                "name": "X-Skyd-Request-Id", "in": "header", "required": False,
                "description": "the request's id, chosen by the client (8-32 lowercase hex): "
                               "sending the same request again under it runs nothing new",
                "schema": {"type": "string", "pattern": "^[0-9a-f]{8,32}$"}}],
            "responses": {"201": _json(_schema(m.SubmitResponse, comps)),
                          "200": _json(_schema(m.SubmitResponse, comps)), "400": err,
                          "409": err, "413": err}}
        body = _schema(verb.body, comps) if verb.body else {"type": "object"}
        op["requestBody"] = {"content": {"application/json": {"schema": body}}}
        paths[f"/v1/requests/{verb.name}"] = {"post": op}
    for read in READS.values():
        op = {"summary": read.summary or read.path, "responses": {
            "200": _json(_schema(read.response, comps)) if read.response else {"description": "OK"},
            "400": err}}
        if read.body is not None:
            op["requestBody"] = {"content": {"application/json": {"schema": _schema(read.body, comps)}}}
        paths.setdefault(read.path, {})[read.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "skyd daemon API", "version": skyd.__version__,
                 "description": "HTTP/1.1 + JSON over the daemon's Unix socket"},
        "paths": paths,
        "components": {"schemas": comps},
    }
