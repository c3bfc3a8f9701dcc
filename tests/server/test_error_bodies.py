"""Error and DELETE bodies byte for byte as kube-apiserver writes them: a ``Status`` with its fields in
metav1.Status' order (kind, apiVersion, metadata, status, message, reason, details, code), empty
fields left out (``details.group`` for the core group), Go's JSON escapes and a trailing newline;
DELETE answers the object where upstream's registry returns it (``ReturnDeletedObject``, or kept
by finalizers) and a Success ``Status`` naming the uid otherwise; deletecollection answers the list
of what it deleted. Checked over raw HTTP and through the real ``kubernetes`` Python client, which
parses each answer as the type upstream's OpenAPI declares."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.server.sdk import run_client
from tests.server.test_api_bad_input import Served
from trimaran.server.tokens import TokenStore

plane = shared_plane("errors")
NS = "errors"
CM = f"/api/v1/namespaces/{NS}/configmaps"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


@pytest.fixture(scope="module")
def http(plane: ControlPlaneHandle) -> Iterator[httpx.Client]:
    with Served(plane.home).client() as client:
        assert client.post("/api/v1/namespaces", json={"metadata": {"name": NS}}).status_code == 201
        yield client


def _configmap(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def _lease(name: str) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
            "spec": {"holderIdentity": "a"}}


def _status(code: int, reason: str, message: str, details: dict | None = None) -> bytes:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason}
    if details is not None:
        body["details"] = details
    body["code"] = code
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def test_already_exists_not_found_and_conflict_are_upstreams_bytes(http: httpx.Client) -> None:
    assert http.post(CM, json=_configmap("twice")).status_code == 201
    again = http.post(CM, json=_configmap("twice"))
    assert again.status_code == 409
    assert again.content == _status(409, "AlreadyExists", 'configmaps "twice" already exists',
                                    {"name": "twice", "kind": "configmaps"})
    missing = http.get(f"{CM}/nope")
    assert missing.status_code == 404
    assert missing.content == _status(404, "NotFound", 'configmaps "nope" not found',
                                      {"name": "nope", "kind": "configmaps"})
    stale = http.get(f"{CM}/twice").json()
    assert http.put(f"{CM}/twice", json={**stale, "data": {"a": "1"}}).status_code == 200
    conflict = http.put(f"{CM}/twice", json={**stale, "data": {"a": "2"}})
    assert conflict.status_code == 409
    assert conflict.content == _status(
        409, "Conflict", 'Operation cannot be fulfilled on configmaps "twice": the object has been modified; '
        "please apply your changes to the latest version and try again", {"name": "twice", "kind": "configmaps"})
    # A named group's resource is qualified by it, and details carry the group.
    assert http.post(LEASES, json=_lease("l")).status_code == 201
    stale = http.get(f"{LEASES}/l").json()
    assert http.put(f"{LEASES}/l", json={**stale, "spec": {"holderIdentity": "b"}}).status_code == 200
    conflict = http.put(f"{LEASES}/l", json={**stale, "spec": {"holderIdentity": "c"}})
    assert conflict.content == _status(
        409, "Conflict", 'Operation cannot be fulfilled on leases.coordination.k8s.io "l": the object has been '
        "modified; please apply your changes to the latest version and try again",
        {"name": "l", "group": "coordination.k8s.io", "kind": "leases"})


def test_invalid_lists_every_cause_and_aggregates_the_message(http: httpx.Client) -> None:
    refused = http.post(CM, json=_configmap("Bad_Name"))
    assert refused.status_code == 422
    name_rule = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    assert refused.content == _status(
        422, "Invalid", f'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": {name_rule}',
        {"name": "Bad_Name", "kind": "ConfigMap", "causes": [
            {"reason": "FieldValueInvalid", "message": f'Invalid value: "Bad_Name": {name_rule}',
             "field": "metadata.name"}]})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a"}, {"name": "a", "image": "python"}]}}
    refused = http.post(f"/api/v1/namespaces/{NS}/pods", json=pod)
    assert refused.status_code == 422
    assert refused.content == _status(
        422, "Invalid", 'Pod "p" is invalid: [spec.containers[0].image: Required value, '
        'spec.containers[1].name: Duplicate value: "a"]',
        {"name": "p", "kind": "Pod", "causes": [
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"},
            {"reason": "FieldValueDuplicate", "message": 'Duplicate value: "a"', "field": "spec.containers[1].name"}]})


def test_bad_request_and_forbidden(plane: ControlPlaneHandle, http: httpx.Client) -> None:
    assert http.post(CM, json=_configmap("named")).status_code == 201
    mismatch = http.put(f"{CM}/named", json=_configmap("other"))
    assert mismatch.content == _status(
        400, "BadRequest", "the name of the object (other) does not match the name on the URL (named)")
    viewer = TokenStore(plane.home).create("view")
    with Served(plane.home).client(token=viewer) as view:
        refused = view.post(CM, json=_configmap("viewer"))
    assert refused.status_code == 403
    user = re.search(r'User "([^"]*)"', refused.json()["message"]).group(1)
    assert refused.content == _status(
        403, "Forbidden", f'configmaps is forbidden: User "{user}" cannot create resource "configmaps" in API '
        f'group "" in the namespace "{NS}"', {"kind": "configmaps"})


def test_a_path_or_method_no_route_takes_is_go_restfuls_generic_status(http: httpx.Client) -> None:
    put = http.put(CM, json=_configmap("x"))
    assert put.status_code == 405
    assert put.content == _status(405, "MethodNotAllowed",
                                  "the server does not allow this method on the requested resource", {})
    nowhere = http.get("/api/v1/namespaces/errors/configmaps/x/nonsense/more")
    assert nowhere.status_code == 404
    assert nowhere.content == _status(404, "NotFound", "the server could not find the requested resource", {})


def test_delete_answers_a_status_naming_the_uid_or_the_object(http: httpx.Client) -> None:
    created = http.post(CM, json=_configmap("gone")).json()
    gone = http.delete(f"{CM}/gone")
    assert gone.status_code == 200
    assert gone.content == json.dumps(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
         "details": {"name": "gone", "kind": "configmaps", "uid": created["metadata"]["uid"]}},
        separators=(",", ":")).encode() + b"\n"
    # Kept by a finalizer: the object, with its deletionTimestamp.
    kept = _configmap("kept")
    kept["metadata"]["finalizers"] = ["example.com/hold"]
    assert http.post(CM, json=kept).status_code == 201
    answer = http.delete(f"{CM}/kept").json()
    assert answer["kind"] == "ConfigMap" and answer["metadata"]["deletionTimestamp"]
    assert http.patch(f"{CM}/kept", json={"metadata": {"finalizers": None}},
                      headers={"content-type": "application/merge-patch+json"}).status_code == 200
    # deletecollection: the list of what it deleted.
    for name in ("c1", "c2"):
        assert http.post(CM, json={**_configmap(name), "metadata": {"name": name, "labels": {"batch": "x"}}}
                         ).status_code == 201
    answer = http.delete(CM, params={"labelSelector": "batch=x"}).json()
    assert answer["kind"] == "ConfigMapList" and answer["apiVersion"] == "v1"
    assert [i["metadata"]["name"] for i in answer["items"]] == ["c1", "c2"]
    assert http.get(CM, params={"labelSelector": "batch=x"}).json()["items"] == []


PYTHON_CLIENT = r'''
import json
from kubernetes import client, config

config.load_kube_config()
core = client.CoreV1Api()
NS = "errors-python"
core.create_namespace({"metadata": {"name": NS}})
core.create_namespaced_service(NS, {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}})
core.create_namespaced_config_map(NS, {"metadata": {"name": "cm"}})
core.create_namespaced_service_account(NS, {"metadata": {"name": "robot"}})
core.create_namespaced_config_map(NS, {"metadata": {"name": "more", "labels": {"x": "y"}}})
service = core.delete_namespaced_service("web", NS)
configmap = core.delete_namespaced_config_map("cm", NS)
account = core.delete_namespaced_service_account("robot", NS)
collection = core.delete_collection_namespaced_config_map(NS, label_selector="x=y")
try:
    core.read_namespaced_config_map("cm", NS)
    missing = None
except client.ApiException as exc:
    missing = [exc.status, exc.reason, json.loads(exc.body)["reason"]]
print(json.dumps({
    "service": [type(service).__name__, service.metadata.name],
    "configmap": [type(configmap).__name__, configmap["status"], configmap["details"]["kind"]],
    "account": [type(account).__name__, account.metadata.name],
    "collection": type(collection).__name__,
    "missing": missing,
}))
'''


def test_the_python_client_parses_each_delete_as_upstreams_openapi_declares(plane: ControlPlaneHandle,
                                                                             tmp_path: Path) -> None:
    out = run_client(sys.executable, plane, PYTHON_CLIENT, tmp_path)
    assert out["service"] == ["V1Service", "web"]
    assert out["configmap"] == ["dict", "Success", "configmaps"]  # the client declares "object" here
    assert out["account"] == ["V1ServiceAccount", "robot"]
    assert out["collection"] == "V1Status"
    assert out["missing"] == [404, "Not Found", "NotFound"]
