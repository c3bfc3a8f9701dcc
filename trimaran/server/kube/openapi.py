"""``/openapi/v3``: an index, then one OpenAPI 3.0 document per group version.

kubectl reads it before every ``apply``/``create``: when a kind's PATCH operation takes the
``fieldValidation`` parameter, kubectl leaves validation to the server (``fieldValidation=Strict``)
instead of failing with "failed to download openapi". The schemas are the ones the server
validates with: each kind's pydantic model, turned into OpenAPI 3.0 (``nullable`` for optional
fields, components instead of ``$defs``).
"""

from __future__ import annotations

import copy
import hashlib
from functools import lru_cache
from typing import Any

import orjson

from trimaran.api.authorization import REVIEW_KINDS
from trimaran.api.crd import is_custom, published_schema
from trimaran.api.kinds import KindInfo
from trimaran.api.patchmeta import TYPES, kind_type
from trimaran.server.kube.metrics import GROUP as METRICS_GROUP
from trimaran.server.kube.metrics import VERSION as METRICS_VERSION

__all__ = ["kind_schema", "openapi_document", "openapi_index", "openapi_v2"]

_REF = "#/components/schemas/"


def _convert(node: Any, rename: dict[str, str]) -> Any:
    """JSON Schema (pydantic's) to OpenAPI 3.0's dialect."""
    if isinstance(node, list):
        return [_convert(n, rename) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _convert(v, rename) for k, v in node.items() if k not in ("$defs", "const", "title")}
    if "$ref" in node:
        out = {"$ref": _REF + rename[node["$ref"].rsplit("/", 1)[-1]]}
    if "const" in node:
        out["enum"] = [node["const"]]
    options = node.get("anyOf")
    if isinstance(options, list):
        rest = [o for o in options if o != {"type": "null"}]
        if len(rest) < len(options):
            out.pop("anyOf")
            if len(rest) == 1:
                single = _convert(rest[0], rename)
                out = {**out, **single} if "$ref" not in single else {**out, "allOf": [single]}
            else:
                out["anyOf"] = _convert(rest, rename)
            out["nullable"] = True
    return out


@lru_cache(maxsize=64)
def _model_schema(info: KindInfo) -> tuple[dict[str, Any], dict[str, Any]]:
    """The kind's schema and its components, names prefixed by the kind to keep kinds apart."""
    if is_custom(info):  # a user's CRD: its version's own schema, which has no references
        return {**published_schema(info), "x-kubernetes-group-version-kind": [
            {"group": info.group, "version": info.version, "kind": info.kind}]}, {}
    raw = info.model.model_json_schema(by_alias=True)
    prefix = f"{info.group or 'core'}.{info.version}.{info.kind}."
    rename = {name: prefix + name for name in raw.get("$defs", {})}
    components = {rename[name]: _convert(schema, rename) for name, schema in raw.get("$defs", {}).items()}
    schema = _convert(raw, rename)
    if info.builtin:
        _patch_extensions(schema, components, kind_type(f"{info.group}/{info.version}".lstrip("/"), info.kind),
                          set())
    schema["x-kubernetes-group-version-kind"] = [{"group": info.group, "version": info.version, "kind": info.kind}]
    return schema, components


def _patch_extensions(schema: dict[str, Any], components: dict[str, Any], type_name: str,
                      seen: set[tuple[str, str]]) -> None:
    """Publish strategic merge's facts on the properties of a built-in kind's schema, as upstream's
    OpenAPI does (``x-kubernetes-patch-strategy``, ``x-kubernetes-patch-merge-key``): kubectl's
    client-side apply computes its patch from them (``$retainKeys``, ``$setElementOrder``)."""
    for field, meta in TYPES.get(type_name, {}).items():
        prop = (schema.get("properties") or {}).get(field)
        if not isinstance(prop, dict):
            continue
        if "$ref" in prop:  # OpenAPI 3.0 ignores a $ref's siblings: upstream wraps it in allOf
            prop = schema["properties"][field] = {"allOf": [{"$ref": prop.pop("$ref")}], **prop}
        prop.update(meta.extension())
        if not meta.type:
            continue
        inner = prop.get("items", prop) if prop.get("type") == "array" else prop
        refs = [inner.get("$ref")] + [o.get("$ref") for o in inner.get("allOf") or [] if isinstance(o, dict)]
        for ref in filter(None, refs):
            name = ref[len(_REF):]
            if (name, meta.type) not in seen and name in components:
                seen.add((name, meta.type))
                _patch_extensions(components[name], components, meta.type, seen)


def kind_schema(info: KindInfo, inline: bool = False) -> dict[str, Any]:
    """The kind's schema; ``inline`` resolves every reference (a CRD's openAPIV3Schema has none)."""
    if info.model is None:
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema, components = _model_schema(info)
    if not inline:
        return schema

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [resolve(n, seen) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if ref:
            name = ref[len(_REF):]
            if name in seen:  # a recursive type: leave its inside open
                return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            return resolve(components[name], (*seen, name))
        return {k: resolve(v, seen) for k, v in node.items() if k != "x-kubernetes-group-version-kind"}

    return resolve(copy.deepcopy(schema), ())


def _group_version_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _param(name: str, where: str = "query", description: str = "", required: bool = False,
           kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": where, "description": description, "required": required, "schema": {"type": kind}}


_WRITE_PARAMS = [
    _param("dryRun", description="All: validate and answer without storing"),
    _param("fieldManager", description="the name of the actor making the change"),
    _param("fieldValidation", description="Ignore, Warn or Strict: what to do with unknown fields"),
]
_LIST_PARAMS = [_param(n) for n in ("labelSelector", "fieldSelector", "resourceVersion", "continue")] + [
    _param("limit", kind="integer"), _param("timeoutSeconds", kind="integer"), _param("watch", kind="boolean"),
    _param("allowWatchBookmarks", kind="boolean")]


def _ok(ref: str) -> dict[str, Any]:
    return {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": _REF + ref}}}},
            "401": {"description": "Unauthorized"}}


def openapi_document(group: str, version: str, served: list[KindInfo], create_only: bool = False
                     ) -> dict[str, Any] | None:
    """The OpenAPI document of one group version, or None when nothing is served there;
    ``create_only`` for kinds that are only ever created (the reviews)."""
    infos = [i for i in served if i.group == group and i.version == version]
    if not infos:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status": {"type": "object", "properties": {
            "kind": {"type": "string"}, "apiVersion": {"type": "string"}, "status": {"type": "string"},
            "message": {"type": "string"}, "reason": {"type": "string"}, "code": {"type": "integer"},
            "details": {"type": "object"}}},
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch": {"type": "object"},
    }
    base = "/" + _group_version_path(group, version)
    for info in infos:
        name = f"{info.group or 'core'}.{info.version}.{info.kind}"
        if info.model is not None:
            schema, components = _model_schema(info)
            schemas.update(components)
            schemas[name] = schema
        else:
            schemas[name] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                             "x-kubernetes-group-version-kind": [
                                 {"group": info.group, "version": info.version, "kind": info.kind}]}
        schemas[name + "List"] = {"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
            "items": {"type": "array", "items": {"$ref": _REF + name}}},
            "x-kubernetes-group-version-kind": [{"group": info.group, "version": info.version,
                                                 "kind": info.list_kind}]}
        gvk = {"group": info.group, "version": info.version, "kind": info.kind}
        body = {"required": True, "content": {"application/json": {"schema": {"$ref": _REF + name}}}}
        patch_body = {"required": True, "content": {
            t: {"schema": {"$ref": _REF + "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}}
            for t in ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")
            + (("application/strategic-merge-patch+json",) if info.builtin else ())}}

        def op(action: str, op_id: str, responses: dict[str, Any], params: list[dict[str, Any]],
               request: dict[str, Any] | None = None, kind: dict[str, Any] = gvk) -> dict[str, Any]:
            out: dict[str, Any] = {"operationId": op_id, "x-kubernetes-action": action,
                                   "x-kubernetes-group-version-kind": kind, "parameters": params,
                                   "responses": responses, "tags": [_group_version_path(group, version)]}
            if request:
                out["requestBody"] = request
            return out

        ns_param = [_param("namespace", "path", required=True)] if info.namespaced else []
        name_param = [_param("name", "path", required=True)]
        collection = f"{base}/namespaces/{{namespace}}/{info.plural}" if info.namespaced else f"{base}/{info.plural}"
        item = f"{collection}/{{name}}"
        suffix = ("Namespaced" if info.namespaced else "") + info.kind
        if create_only:  # a review: created to be answered, never stored
            paths[collection] = {"parameters": ns_param, "post": op("post", f"create{suffix}", {
                **_ok(name), "201": _ok(name)["200"]}, _WRITE_PARAMS, body)}
            continue
        if info.model is None:
            paths[collection] = {"parameters": ns_param, "get": op("list", f"list{suffix}", _ok(name + "List"),
                                                                   _LIST_PARAMS)}
            paths[item] = {"parameters": ns_param + name_param, "get": op("get", f"read{suffix}", _ok(name), [])}
            continue
        paths[collection] = {
            "parameters": ns_param,
            "get": op("list", f"list{suffix}", _ok(name + "List"), _LIST_PARAMS),
            "post": op("post", f"create{suffix}", {**_ok(name), "201": _ok(name)["200"]}, _WRITE_PARAMS, body),
            "delete": op("deletecollection", f"deleteCollection{suffix}",
                         _ok("io.k8s.apimachinery.pkg.apis.meta.v1.Status"), _LIST_PARAMS),
        }
        paths[item] = {
            "parameters": ns_param + name_param,
            "get": op("get", f"read{suffix}", _ok(name), []),
            "put": op("put", f"replace{suffix}", _ok(name), _WRITE_PARAMS, body),
            "patch": op("patch", f"patch{suffix}", _ok(name), _WRITE_PARAMS + [_param("force", kind="boolean")],
                        patch_body),
            "delete": op("delete", f"delete{suffix}", _ok("io.k8s.apimachinery.pkg.apis.meta.v1.Status"),
                         [_param("propagationPolicy"), _param("dryRun")]),
        }
        if info.namespaced:
            paths[f"{base}/{info.plural}"] = {"get": op("list", f"list{info.kind}ForAllNamespaces",
                                                        _ok(name + "List"), _LIST_PARAMS)}
        if info.status_subresource:
            paths[f"{item}/status"] = {
                "parameters": ns_param + name_param,
                "get": op("get", f"read{suffix}Status", _ok(name), []),
                "put": op("put", f"replace{suffix}Status", _ok(name), _WRITE_PARAMS, body),
                "patch": op("patch", f"patch{suffix}Status", _ok(name),
                            _WRITE_PARAMS + [_param("force", kind="boolean")], patch_body),
            }
    title = f"Trimaran {group or 'core'}/{version}"
    return {"openapi": "3.0.0", "info": {"title": title, "version": version}, "paths": paths,
            "components": {"schemas": schemas}}


_METRICS = "io.k8s.metrics.pkg.apis.metrics.v1beta1."
_QUANTITIES = {"type": "object", "additionalProperties": {"type": "string"},
               "description": "The resources used: cpu in cores (nanocores, \"n\"), memory the working set in bytes."}


def _metrics_document() -> dict[str, Any]:
    """``metrics.k8s.io/v1beta1``'s document (served by ``metrics.py``, not the kind registry), so that
    ``kubectl explain nodes.metrics.k8s.io`` finds its kinds as metrics-server describes them."""
    def kind(name: str, description: str, fields: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "description": description, "properties": {
            "apiVersion": {"type": "string", "description": "The versioned schema of this object."},
            "kind": {"type": "string", "description": "The REST resource this object represents."},
            "metadata": {"type": "object", "description": "Standard object's metadata."},
            "timestamp": {"type": "string", "format": "date-time",
                          "description": "The end of the window the usage was measured over."},
            "window": {"type": "string", "description": "The length of the window the usage was measured over."},
            **fields}, "x-kubernetes-group-version-kind": [{"group": METRICS_GROUP, "version": METRICS_VERSION,
                                                            "kind": name}]}

    container = {"type": "object", "description": "The resources a container used.", "required": ["name", "usage"],
                 "properties": {"name": {"type": "string", "description": "The container's name."},
                                "usage": _QUANTITIES}}
    schemas = {
        _METRICS + "NodeMetrics": kind("NodeMetrics", "The resources a node used.", {"usage": _QUANTITIES}),
        _METRICS + "PodMetrics": kind("PodMetrics", "The resources a pod's containers used.", {
            "containers": {"type": "array", "items": {"$ref": _REF + _METRICS + "ContainerMetrics"},
                           "description": "The usage of each container."}}),
        _METRICS + "ContainerMetrics": container,
    }
    base = f"/apis/{METRICS_GROUP}/{METRICS_VERSION}"
    paths = {}
    for plural, name, namespaced in (("nodes", "NodeMetrics", False), ("pods", "PodMetrics", True)):
        gvk = {"group": METRICS_GROUP, "version": METRICS_VERSION, "kind": name}
        prefix = f"{base}/namespaces/{{namespace}}" if namespaced else base
        ns_param = [_param("namespace", "path", required=True)] if namespaced else []
        paths[f"{prefix}/{plural}/{{name}}"] = {"parameters": ns_param + [_param("name", "path", required=True)],
                                                "get": {"operationId": f"read{name}", "x-kubernetes-action": "get",
                                                        "x-kubernetes-group-version-kind": gvk,
                                                        "responses": _ok(_METRICS + name)}}
    return {"openapi": "3.0.0", "info": {"title": f"Trimaran {METRICS_GROUP}/{METRICS_VERSION}",
                                         "version": METRICS_VERSION}, "paths": paths,
            "components": {"schemas": schemas}}


def _review_infos(group: str) -> list[KindInfo]:
    """The review kinds of ``group`` (served by ``server/rbac/reviews.py``, not the registry), described
    as kinds so that ``kubectl explain selfsubjectaccessreviews`` reads them."""
    return [KindInfo(r.kind, f"{r.group}/v1", r.group, "v1", r.plural, (), r.namespaced, r.model,
                     status_subresource=False) for r in REVIEW_KINDS if r.group == group]


_REVIEW_GROUPS = tuple(dict.fromkeys(r.group for r in REVIEW_KINDS))


@lru_cache(maxsize=64)
def _document_bytes(group: str, version: str, served: tuple[KindInfo, ...]) -> bytes:
    if (group, version) == (METRICS_GROUP, METRICS_VERSION):
        return orjson.dumps(_metrics_document())
    if group in _REVIEW_GROUPS and version == "v1":
        return orjson.dumps(openapi_document(group, version, _review_infos(group), create_only=True))
    doc = openapi_document(group, version, list(served))
    return orjson.dumps(doc) if doc is not None else b""


def document_bytes(group: str, version: str, served: list[KindInfo]) -> bytes:
    """The encoded document (cached: it changes only with the registry)."""
    return _document_bytes(group, version, tuple(served))


def openapi_index(served: list[KindInfo]) -> dict[str, Any]:
    paths = {}
    for group, version in dict.fromkeys([*((i.group, i.version) for i in served), (METRICS_GROUP, METRICS_VERSION),
                                         *((g, "v1") for g in _REVIEW_GROUPS)]):
        gv = _group_version_path(group, version)
        digest = hashlib.sha256(document_bytes(group, version, served)).hexdigest()[:16].upper()
        paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
    return {"paths": paths}


def _protobuf_field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2)."""
    size, length = bytearray(), len(payload)
    while True:
        byte, length = length & 0x7F, length >> 7
        size.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([number << 3 | 2]) + bytes(size) + payload


def openapi_v2(protobuf: bool) -> tuple[bytes, str]:
    """``/openapi/v2`` without definitions, for kubectl before 1.27, which validates against it (and
    fetches only its protobuf form): a kind it does not describe is left to the server, which
    validates every write anyway. gnostic's ``Document``: swagger = 1, info = 2 (title 1, version 2).
    """
    title, version = "Trimaran", "v1"
    if not protobuf:
        return orjson.dumps({"swagger": "2.0", "info": {"title": title, "version": version}, "paths": {}}), \
            "application/json"
    info = _protobuf_field(1, title.encode()) + _protobuf_field(2, version.encode())
    # Asked for by the media type above, answered as kube-openapi does: Go's mime parser rejects the '@'.
    return _protobuf_field(1, b"2.0") + _protobuf_field(2, info), "application/octet-stream"
