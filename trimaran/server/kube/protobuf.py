"""Request bodies in Kubernetes' protobuf encoding, for the core kinds kubectl's generators send.

``kubectl create namespace|configmap|secret|serviceaccount NAME`` and ``kubectl autoscale`` build typed
objects and send them as ``application/vnd.kubernetes.protobuf``: the magic ``k8s\\0``, then a
``runtime.Unknown`` holding the TypeMeta and the object's own message. The messages below are the subset of
k8s.io/api core/v1, autoscaling/v1 and apimachinery meta/v1 those commands fill in, with upstream's field numbers,
declared as descriptors and parsed by the protobuf library; the result is the object's JSON form,
which the API then admits like any other body. Other kinds in protobuf stay a 415, as for custom
resources on a cluster, and kubectl's ``-f`` path sends JSON.
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

__all__ = ["MEDIA_TYPE", "ProtobufError", "decode"]

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"
_PACKAGE = "trimaran.k8s"

_STRING = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_BYTES = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
_BOOL = descriptor_pb2.FieldDescriptorProto.TYPE_BOOL
_INT32 = descriptor_pb2.FieldDescriptorProto.TYPE_INT32
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED

# message -> (json name, number, type, repeated); a type is a scalar, a message name, or
# ("map", value type) for map<string, value>.
_SCHEMA: dict[str, list[tuple[str, int, Any, bool]]] = {
    "Unknown": [("typeMeta", 1, "TypeMeta", False), ("raw", 2, _BYTES, False),
                ("contentEncoding", 3, _STRING, False), ("contentType", 4, _STRING, False)],
    "TypeMeta": [("apiVersion", 1, _STRING, False), ("kind", 2, _STRING, False)],
    "ObjectMeta": [("name", 1, _STRING, False), ("generateName", 2, _STRING, False),
                   ("namespace", 3, _STRING, False), ("labels", 11, ("map", _STRING), False),
                   ("annotations", 12, ("map", _STRING), False), ("finalizers", 14, _STRING, True)],
    "Namespace": [("metadata", 1, "ObjectMeta", False), ("spec", 2, "NamespaceSpec", False)],
    "NamespaceSpec": [("finalizers", 1, _STRING, True)],
    "ConfigMap": [("metadata", 1, "ObjectMeta", False), ("data", 2, ("map", _STRING), False),
                  ("binaryData", 3, ("map", _BYTES), False), ("immutable", 4, _BOOL, False)],
    "Secret": [("metadata", 1, "ObjectMeta", False), ("data", 2, ("map", _BYTES), False),
               ("type", 3, _STRING, False), ("stringData", 4, ("map", _STRING), False),
               ("immutable", 5, _BOOL, False)],
    "ServiceAccount": [("metadata", 1, "ObjectMeta", False), ("secrets", 2, "ObjectReference", True),
                       ("imagePullSecrets", 3, "LocalObjectReference", True),
                       ("automountServiceAccountToken", 4, _BOOL, False)],
    "ObjectReference": [("kind", 1, _STRING, False), ("namespace", 2, _STRING, False),
                        ("name", 3, _STRING, False), ("uid", 4, _STRING, False), ("apiVersion", 5, _STRING, False),
                        ("resourceVersion", 6, _STRING, False), ("fieldPath", 7, _STRING, False)],
    "LocalObjectReference": [("name", 1, _STRING, False)],
    # autoscaling/v1, which `kubectl autoscale` sends.
    "HorizontalPodAutoscaler": [("metadata", 1, "ObjectMeta", False),
                                ("spec", 2, "HorizontalPodAutoscalerSpec", False)],
    "HorizontalPodAutoscalerSpec": [("scaleTargetRef", 1, "CrossVersionObjectReference", False),
                                    ("minReplicas", 2, _INT32, False), ("maxReplicas", 3, _INT32, False),
                                    ("targetCPUUtilizationPercentage", 4, _INT32, False)],
    "CrossVersionObjectReference": [("kind", 1, _STRING, False), ("name", 2, _STRING, False),
                                    ("apiVersion", 3, _STRING, False)],
}
# The kinds a body may carry: (apiVersion, kind) -> message.
_KINDS = {("v1", kind): kind for kind in ("Namespace", "ConfigMap", "Secret", "ServiceAccount")}
_KINDS["autoscaling/v1", "HorizontalPodAutoscaler"] = "HorizontalPodAutoscaler"


class ProtobufError(ValueError):
    """A protobuf body that is malformed or carries a kind not decoded here."""


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="trimaran_k8s_subset.proto", package=_PACKAGE,
                                               syntax="proto2")
    for name, fields in _SCHEMA.items():
        message = proto.message_type.add(name=name)
        for json_name, number, kind, repeated in fields:
            field = message.field.add(name=json_name, json_name=json_name, number=number,
                                      label=_REPEATED if repeated else _OPTIONAL)
            if isinstance(kind, tuple):  # map<string, V>: a repeated nested entry type
                entry = message.nested_type.add(name=f"{json_name[0].upper()}{json_name[1:]}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", json_name="key", number=1, label=_OPTIONAL, type=_STRING)
                entry.field.add(name="value", json_name="value", number=2, label=_OPTIONAL, type=kind[1])
                field.label = _REPEATED
                field.type = _MESSAGE
                field.type_name = f".{_PACKAGE}.{name}.{entry.name}"
            elif isinstance(kind, str):
                field.type = _MESSAGE
                field.type_name = f".{_PACKAGE}.{kind}"
            else:
                field.type = kind
    return proto


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file())
_CLASSES = {name: message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
            for name in _SCHEMA}


def _to_json(message: Any) -> dict[str, Any]:
    """The fields a client set, in Kubernetes' JSON form (bytes as base64, maps as objects). Go
    encodes every string field, empty ones too: an empty string is a field left out."""
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        if value == "":
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry_value = field.message_type.fields_by_name["value"]
            out[field.json_name] = {
                k: base64.b64encode(v).decode() if entry_value.type == _BYTES else v for k, v in value.items()}
        elif field.message_type is not None:
            out[field.json_name] = _to_json(value)
            if not out[field.json_name]:
                del out[field.json_name]
        elif field.is_repeated:
            out[field.json_name] = list(value)
        elif field.type == _BYTES:
            out[field.json_name] = base64.b64encode(value).decode()
        else:
            out[field.json_name] = value
    return out


def decode(body: bytes) -> dict[str, Any]:
    """The object a protobuf request body carries, as the JSON body the API would have received."""
    if not body.startswith(_MAGIC):
        raise ProtobufError("a protobuf body starts with the bytes 'k8s\\x00'")
    envelope = _CLASSES["Unknown"]()
    try:
        envelope.ParseFromString(body[len(_MAGIC):])
    except DecodeError as exc:
        raise ProtobufError(f"the protobuf envelope cannot be decoded: {exc}") from None
    if envelope.contentEncoding:
        raise ProtobufError(f'content encoding "{envelope.contentEncoding}" is not supported')
    api_version, kind = envelope.typeMeta.apiVersion, envelope.typeMeta.kind
    message_name = _KINDS.get((api_version, kind))
    if message_name is None:
        raise ProtobufError(f"{kind} ({api_version}) is not accepted in protobuf here; send it as JSON "
                            "(kubectl create -f FILE does)")
    message = _CLASSES[message_name]()
    try:
        message.ParseFromString(envelope.raw)
    except DecodeError as exc:
        raise ProtobufError(f"the {kind} cannot be decoded: {exc}") from None
    return {"apiVersion": api_version, "kind": kind, **_to_json(message)}
