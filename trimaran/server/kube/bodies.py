"""Request bodies, JSON or YAML, decoded into plain JSON values or refused with a 400.

What comes out can be validated, copied, patched and stored without surprises: no value nested
deeper than ``MAX_DEPTH`` (the handlers recurse, and the store's encoder stops at 254 levels), no
more values than a 3 MiB JSON body can hold (a YAML alias "bomb" expands far beyond its size), and
from YAML only what JSON has: string keys (others are written as strings, as ``sigs.k8s.io/yaml``
does), timestamps left as the strings they were, finite numbers.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
import yaml

from trimaran import jsonbody
from trimaran.jsonbody import MAX_DEPTH
from trimaran.server.kube.errors import StatusError

__all__ = ["MAX_DEPTH", "MAX_VALUES", "check_shape", "load_json", "load_yaml"]

MAX_VALUES = 3 * 1024 * 1024 // 2  # "[0,0,...]": no JSON body under the size limit holds more


class _Loader(yaml.SafeLoader):
    """YAML 1.1 without timestamps: ``2024-01-01`` stays a string, as it does in a Kubernetes manifest."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def check_shape(value: Any, what: str = "the body of the request") -> None:
    """Refuse ``value`` (400) when it nests deeper than ``MAX_DEPTH`` or has too many values."""
    try:
        jsonbody.check_shape(value, what, MAX_DEPTH, MAX_VALUES)
    except jsonbody.BodyError as exc:
        raise StatusError.bad_request(str(exc)) from None


def load_json(body: bytes, what: str = "the body of the request") -> Any:
    try:
        value = jsonbody.loads(body, what)
    except jsonbody.BodyError as exc:
        raise StatusError.bad_request(str(exc)) from None
    check_shape(value, what)
    return value


def load_yaml(body: bytes, what: str = "the body of the request") -> Any:
    try:
        value = yaml.load(body, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise StatusError.bad_request(f"error decoding YAML: {exc}") from None
    except RecursionError:
        raise StatusError.bad_request(str(jsonbody.TooDeep(what, MAX_DEPTH))) from None
    check_shape(value, what)
    return _plain(value, what)


def _key(key: Any, what: str) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool) or key is None:
        return orjson.dumps(key).decode()
    if isinstance(key, (int, float)):
        return str(key)
    raise StatusError.bad_request(f"{what}: a YAML key of type {type(key).__name__} cannot be a JSON key")


def _plain(value: Any, what: str) -> Any:
    """``value`` with JSON's types only (its depth is checked first, so the recursion is bounded)."""
    if isinstance(value, dict):
        return {_key(k, what): _plain(v, what) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, what) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise StatusError.bad_request(f"{what}: {value} is not a number JSON can carry")
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise StatusError.bad_request(f"{what}: a YAML value of type {type(value).__name__} is not supported")
