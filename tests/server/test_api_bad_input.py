"""Bad requests against a real control plane, over HTTPS with the home's CA and its bearer token.

Every refusal must be a Kubernetes ``Status`` (``kind: Status``, ``status: Failure``) with the
code and reason clients branch on (``apierrors.IsNotFound``, ``IsAlreadyExists``, ``IsConflict``,
``ApiException.reason``) and a message that names the problem, and a refused write must leave the
store as it was. The answers clients rely on when a request succeeds are checked beside them.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from trimaran.server.kube.resources import MAX_BODY_BYTES
from trimaran.server.kubeconfig import kubeconfig_path, read_endpoint
from trimaran.server.tokens import TokenStore

NS = "bad-input"
CM = f"/api/v1/namespaces/{NS}/configmaps"
TF = f"/apis/kubeflow.org/v1/namespaces/{NS}/tfjobs"
JSON = {"content-type": "application/json"}


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def tfjob(name: str) -> dict[str, Any]:
    # Suspended: stored and validated like any TFJob, but no pod is started for it.
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name},
            "spec": {"runPolicy": {"suspend": True}, "tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {
                "spec": {"containers": [{"name": "tensorflow", "image": "python:3.11", "command": ["true"]}]}}}}}}


@dataclass
class Served:
    """A running control plane, reached as its kubeconfig says."""

    home: Path

    def client(self, token: str | None = "", **kwargs: Any) -> httpx.Client:
        """A client trusting the home's CA; ``token`` "" is the kubeconfig's, None sends none."""
        endpoint = read_endpoint(kubeconfig_path(self.home))
        assert endpoint.ca_pem is not None and endpoint.server.startswith("https://")
        context = ssl.create_default_context(cadata=endpoint.ca_pem.decode())
        token = endpoint.token if token == "" else token
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        headers.update(kwargs.pop("headers", {}))
        return httpx.Client(base_url=endpoint.server, verify=context, headers=headers, timeout=30, **kwargs)


def _stop(home: Path) -> None:
    from trimaran.server.daemon import stop_pods, stop_server

    stop_server(home)
    stop_pods(home, grace_seconds=1.0)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One control plane for the module's tests: each uses names of its own."""
    from trimaran.server.daemon import start_server

    home = tmp_path_factory.mktemp("bad-input") / "home"
    start_server(home=home)
    try:
        yield Served(home)
    finally:
        _stop(home)


@pytest.fixture
def api(served: Served) -> Iterator[httpx.Client]:
    with served.client() as client:
        yield client


def failure(response: httpx.Response, code: int, reason: str, *mentions: str) -> dict[str, Any]:
    """The response's Status, checked: ``code``, ``reason``, and each of ``mentions`` in its message."""
    assert response.status_code == code, f"{response.request.method} {response.request.url}: " \
                                         f"{response.status_code} {response.text[:500]}"
    assert response.headers["content-type"].startswith("application/json"), response.headers
    status = response.json()
    assert status["kind"] == "Status" and status["apiVersion"] == "v1", status
    assert status["status"] == "Failure" and status["code"] == code and status["reason"] == reason, status
    for text in mentions:
        assert text in status["message"], (text, status["message"])
    return status


def stored(api: httpx.Client) -> dict[tuple[str, str], Any]:
    """Every ConfigMap and TFJob of the test namespace as written: (kind, name) -> the object without
    what controllers change on their own (status, and so resourceVersion)."""
    out = {}
    for path in (CM, TF):
        listed = api.get(path)
        assert listed.status_code == 200, listed.text
        for item in listed.json()["items"]:
            meta = {k: v for k, v in item["metadata"].items() if k not in ("resourceVersion", "managedFields")}
            out[(item["kind"], meta["name"])] = {**item, "metadata": meta, "status": None}
    return out


def test_bodies_that_are_not_objects_are_400_and_store_nothing(api: httpx.Client) -> None:
    assert api.post(CM, json=configmap("kept", a="1")).status_code == 201
    before = stored(api)
    deep = '{"a":' * 500 + "1" + "}" * 500
    bodies: list[tuple[bytes, str, tuple[str, ...]]] = [
        (b'{"apiVersion": "v1", "kind": "ConfigMap",', "application/json", ("not valid JSON",)),
        (b"{'single': 'quotes'}", "application/json", ("not valid JSON",)),
        (b"[1, 2, 3]", "application/json", ("must be a JSON object",)),
        (b"42", "application/json", ("must be a JSON object",)),
        (b'"a string"', "application/json", ("must be a JSON object",)),
        (b"null", "application/json", ("must be a JSON object",)),
        (b"", "application/json", ("not valid JSON",)),
        # 500 levels: within what the JSON parser takes, beyond what the API accepts.
        (deep.encode(), "application/json", ("nested too deeply",)),
        (('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "deep"}, "data": ' + deep + "}").encode(),
         "application/json", ("nested too deeply",)),
        (b"[" * 2000 + b"]" * 2000, "application/json", ("nested too deeply",)),
        (b"a: " + b"{b: " * 500 + b"1" + b"}" * 500, "application/yaml", ("nested too deeply",)),
        (b"a: [unclosed", "application/yaml", ("error decoding YAML",)),
        (b"!!python/object/apply:os.system ['true']", "application/yaml", ("error decoding YAML",)),
        (b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bin}\ndata: {x: !!binary aGk=}", "application/yaml",
         ("bytes is not supported",)),
    ]
    # A YAML alias "bomb": 10^7 values from a few hundred bytes.
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6))
    bodies.append((bomb.encode(), "application/yaml", ("more than",)))
    for body, content_type, mentions in bodies:
        failure(api.post(CM, content=body, headers={"content-type": content_type}), 400, "BadRequest", *mentions)
    for body, content_type, mentions in bodies[:8]:
        failure(api.put(f"{CM}/kept", content=body, headers={"content-type": content_type}), 400, "BadRequest",
                *mentions)
        failure(api.post(TF, content=body, headers={"content-type": content_type}), 400, "BadRequest", *mentions)
    for patch_type in ("application/merge-patch+json", "application/json-patch+json",
                       "application/strategic-merge-patch+json"):
        failure(api.patch(f"{CM}/kept", content=b"{nope", headers={"content-type": patch_type}), 400, "BadRequest",
                "not valid JSON")
        failure(api.patch(f"{CM}/kept", content=deep.encode(), headers={"content-type": patch_type}), 400,
                "BadRequest", "nested too deeply")
    failure(api.patch(f"{CM}/kept", content=b"a: " + b"[" * 600 + b"]" * 600,
                      headers={"content-type": "application/apply-patch+yaml"}), 400, "BadRequest", "nested too deeply")
    failure(api.patch(f"{CM}/kept", content=b"- 1\n- 2", headers={"content-type": "application/apply-patch+yaml"}),
            400, "BadRequest", "must be an object")
    failure(api.patch(f"{CM}/kept", content=b"[1]", headers={"content-type": "application/merge-patch+json"}),
            400, "BadRequest", "must be a JSON object")
    failure(api.patch(f"{CM}/kept", content=b'{"op": "add"}', headers={"content-type": "application/json-patch+json"}),
            400, "BadRequest", "list of operations")
    # A patch that would leave metadata something other than an object is refused, not stored.
    failure(api.patch(f"{CM}/kept", json={"metadata": 5}, headers={"content-type": "application/merge-patch+json"}),
            422, "Invalid", "metadata")
    failure(api.patch(f"{CM}/kept", content=b'[{"op": "replace", "path": "/metadata", "value": []}]',
                      headers={"content-type": "application/json-patch+json"}), 422, "Invalid", "metadata")
    failure(api.patch(f"{CM}/kept", content=b"apiVersion: v1\nkind: ConfigMap\nmetadata: 5",
                      headers={"content-type": "application/apply-patch+yaml"}), 400, "BadRequest", "metadata")
    for options in (b"[1]", b'{"preconditions": 5}', b"{nope"):
        failure(api.request("DELETE", f"{CM}/kept", content=options, headers=JSON), 400, "BadRequest")
    assert stored(api) == before


def test_kind_api_version_namespace_and_name_must_match_the_path(api: httpx.Client) -> None:
    assert api.post(CM, json=configmap("mine")).status_code == 201
    before = stored(api)
    cases = [
        ({**configmap("x"), "kind": "Secret"}, "kind of the object (Secret)"),
        ({**configmap("x"), "apiVersion": "v2"}, "apiVersion of the object (v2)"),
        (tfjob("x"), "apiVersion of the object (kubeflow.org/v1)"),
        ({**configmap("x"), "metadata": {"name": "x", "namespace": "elsewhere"}}, "namespace"),
        ({**configmap("x"), "metadata": "x"}, "metadata must be an object"),
    ]
    for body, mention in cases:
        failure(api.post(CM, json=body), 400, "BadRequest", mention)
    failure(api.post(TF, json=configmap("x")), 400, "BadRequest", "apiVersion of the object (v1)", "kubeflow.org/v1")
    failure(api.post(TF, json={**configmap("x"), "apiVersion": "kubeflow.org/v1"}), 400, "BadRequest",
            "kind of the object (ConfigMap)", "TFJob")
    # A custom resource must name its kind and apiVersion (a built-in kind takes the endpoint's).
    failure(api.post(TF, json={k: v for k, v in tfjob("x").items() if k != "kind"}), 400, "BadRequest",
            "'Kind' is missing")
    failure(api.post(TF, json={k: v for k, v in tfjob("x").items() if k != "apiVersion"}), 400, "BadRequest",
            "'ApiVersion' is missing")
    failure(api.post(TF, json={**tfjob("x"), "apiVersion": "kubeflow.org/v1beta1"}), 400, "BadRequest",
            "kubeflow.org/v1beta1")
    # "metadata": null is no metadata: the name it lacks is what is wrong.
    failure(api.post(CM, json={**configmap("x"), "metadata": None}), 422, "Invalid", "metadata.name")
    failure(api.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace", "metadata": None}), 422,
            "Invalid", "metadata.name")
    failure(api.put(f"{CM}/mine", json=configmap("other")), 400, "BadRequest", "(other)", "(mine)")
    failure(api.put(f"{CM}/mine", json={**configmap("mine"), "metadata": {"name": "mine", "namespace": "default"}}),
            400, "BadRequest", "namespace")
    assert stored(api) == before
    assert api.get("/api/v1/namespaces/elsewhere/configmaps/x").status_code == 404


def test_invalid_names_are_422_invalid_naming_the_field(api: httpx.Client) -> None:
    before = stored(api)
    for name in ("Bad_Name", "a" * 300, "-leading-dash", "with space"):
        for path, body in ((CM, configmap(name)), (TF, tfjob(name))):
            status = failure(api.post(path, json=body), 422, "Invalid", name)
            details = status["details"]
            assert details["name"] == name and details["kind"] == body["kind"], details
            assert "metadata.name" in [cause["field"] for cause in details["causes"]], details
            assert all(cause["reason"].startswith("Field") and cause["message"] for cause in details["causes"])
    # Every bad field of one object is named, each a cause of its own.
    bad = {**configmap("two-problems"), "data": {"bad key!": "x"}, "metadata": {"name": "Two_Problems"}}
    fields = [c["field"] for c in failure(api.post(CM, json=bad), 422, "Invalid")["details"]["causes"]]
    assert "metadata.name" in fields and any(f.startswith("data") for f in fields), fields
    assert stored(api) == before


def test_unknown_groups_versions_kinds_and_subresources_are_404(api: httpx.Client) -> None:
    assert api.post(CM, json=configmap("there")).status_code == 201
    for path in ("/apis/nonexistent.example.com/v1/widgets", "/apis/nonexistent.example.com",
                 "/apis/kubeflow.org/v9/tfjobs", "/apis/kubeflow.org/v9",
                 f"/apis/kubeflow.org/v1/namespaces/{NS}/widgets", "/api/v2/pods", "/api/v1/widgets",
                 f"/api/v1/namespaces/{NS}/widgets/x", f"{CM}/there/widgets", f"{CM}/there/status",
                 f"{CM}/there/log", f"{TF}/x/bogus", f"{CM}/there/status/deeper/still", "/no/such/path",
                 "/openapi/v3/apis/nonexistent.example.com/v1", "/openapi/v2/nope"):
        status = failure(api.get(path), 404, "NotFound")
        assert status["message"], status
    # A resource no route takes: go-restful's generic answer, whose details are empty.
    status = failure(api.get(f"/apis/kubeflow.org/v1/namespaces/{NS}/widgets"), 404, "NotFound")
    assert status["details"] == {}
    # A missing object names itself in details, as apierrors.IsNotFound and kubectl expect.
    status = failure(api.get(f"{CM}/absent"), 404, "NotFound", '"absent"')
    assert status["details"] == {"name": "absent", "kind": "configmaps"}  # an empty group is left out (omitempty)
    status = failure(api.get(f"{TF}/absent"), 404, "NotFound", 'tfjobs.kubeflow.org "absent" not found')
    assert status["details"]["group"] == "kubeflow.org"
    failure(api.get(f"/api/v1/namespaces/{NS}/pods/absent/log"), 404, "NotFound", '"absent"')


def test_wrong_content_types_are_415_and_store_nothing(api: httpx.Client) -> None:
    assert api.post(CM, json=configmap("typed", a="1")).status_code == 201
    assert api.post(TF, json=tfjob("typed")).status_code == 201
    before = stored(api)
    body = json.dumps(configmap("text")).encode()
    for content_type in ("text/plain", "application/xml", "application/x-www-form-urlencoded",
                         "application/vnd.kubernetes.protobuf"):
        failure(api.post(CM, content=body, headers={"content-type": content_type}), 415, "UnsupportedMediaType",
                content_type)
    # Strategic merge is for built-in kinds only: a custom resource answers 415, as kube-apiserver.
    strategic = {"content-type": "application/strategic-merge-patch+json"}
    failure(api.patch(f"{TF}/typed", json={"metadata": {"labels": {"a": "b"}}}, headers=strategic), 415,
            "UnsupportedMediaType", "application/strategic-merge-patch+json")
    for content_type in ("application/json", "text/plain", "application/x-unknown-patch", ""):
        failure(api.patch(f"{CM}/typed", content=b'{"data": {"a": "2"}}', headers={"content-type": content_type}),
                415, "UnsupportedMediaType", "application/merge-patch+json")
    assert stored(api) == before
    # The same patch with a type it takes goes through.
    patched = api.patch(f"{CM}/typed", json={"data": {"a": "2"}}, headers=strategic)
    assert patched.status_code == 200 and patched.json()["data"] == {"a": "2"}


def test_bodies_over_3_mib_are_413(api: httpx.Client) -> None:
    before = stored(api)
    assert MAX_BODY_BYTES == 3 * 1024 * 1024
    big = json.dumps(configmap("big", a="x" * MAX_BODY_BYTES)).encode()
    failure(api.post(CM, content=big, headers=JSON), 413, "RequestEntityTooLarge", str(MAX_BODY_BYTES))
    failure(api.put(f"{CM}/big", content=big, headers=JSON), 413, "RequestEntityTooLarge")
    failure(api.patch(f"{CM}/big", content=big, headers={"content-type": "application/merge-patch+json"}), 413,
            "RequestEntityTooLarge")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds for a streamed body too
        for start in range(0, len(big), 64 * 1024):
            yield big[start:start + 64 * 1024]

    failure(api.post(CM, content=chunks(), headers=JSON), 413, "RequestEntityTooLarge")
    # Just under the limit is read (and refused for what it is, not for its size).
    failure(api.post(CM, content=b"x" * (MAX_BODY_BYTES - 16), headers=JSON), 400, "BadRequest", "not valid JSON")
    assert stored(api) == before


def test_selectors_and_continue_tokens(api: httpx.Client) -> None:
    for name, tier in (("sel-a", "front"), ("sel-b", "back"), ("sel-c", "back")):
        created = api.post(CM, json={**configmap(name), "metadata": {"name": name, "labels": {"tier": tier}}})
        assert created.status_code == 201, created.text
    for selector in ("tier in (front", "=front", "tier notin front", "!", "tier=front,,", "tier==(x)",
                     "Bad Key=x", "tier=" + "v" * 64, "tier in (a b)"):
        status = failure(api.get(CM, params={"labelSelector": selector}), 400, "BadRequest", "labelSelector")
        assert selector in status["message"], status
    for selector, field in (("spec.foo=x", "spec.foo"), ("status.phase=Running", "status.phase"),
                            ("metadata.labels=x", "metadata.labels")):
        failure(api.get(CM, params={"fieldSelector": selector}), 400, "BadRequest", f'"{field}" is not a known field')
    failure(api.get(CM, params={"fieldSelector": "metadata.name"}), 400, "BadRequest", "metadata.name")
    # The same selectors, well formed, select.
    got = api.get(CM, params={"labelSelector": "tier in (back),!missing", "fieldSelector": "metadata.name!=sel-b"})
    assert [i["metadata"]["name"] for i in got.json()["items"]] == ["sel-c"]
    pods = api.get(f"/api/v1/namespaces/{NS}/pods", params={"fieldSelector": "status.phase=Running"})
    assert pods.status_code == 200 and pods.json()["items"] == []

    # A list in pages hands out a continue token that gets the next page...
    page = api.get(CM, params={"limit": 1, "labelSelector": "tier"})
    assert page.status_code == 200 and len(page.json()["items"]) == 1
    token = page.json()["metadata"]["continue"]
    rest = api.get(CM, params={"limit": 10, "labelSelector": "tier", "continue": token})
    assert [i["metadata"]["name"] for i in rest.json()["items"]] == ["sel-b", "sel-c"]
    # ...and one that is not such a token is 410 Expired: the client lists again from the start.
    forged = [base64.urlsafe_b64encode(json.dumps(v).encode()).decode()
              for v in ({"rv": 1, "after": [1, 2]}, {"rv": 1, "after": ["a"]}, {"rv": "x", "after": ["a", "b"]},
                        ["not", "a", "map"])]
    for garbage in ("garbage", "!!!", "e30=", "Zm9v", "\u00e9t\u00e9", *forged):
        failure(api.get(CM, params={"continue": garbage}), 410, "Expired", "continue")
    failure(api.get(CM, params={"limit": "ten"}), 400, "BadRequest", "limit")


def test_watch_refuses_what_it_cannot_serve(api: httpx.Client) -> None:
    for rv in ("abc", "1.5", "-", "0x10"):
        failure(api.get(CM, params={"watch": "true", "resourceVersion": rv}), 400, "BadRequest", "resource version",
                rv)
    # Without resourceVersionMatch=NotOlderThan the reflector must fall back to list+watch: 422.
    failure(api.get(CM, params={"watch": "true", "sendInitialEvents": "true"}), 422, "Invalid",
            "sendInitialEvents", "NotOlderThan")
    failure(api.get(CM, params={"watch": "true", "sendInitialEvents": "true", "resourceVersionMatch": "Exact"}),
            422, "Invalid", "NotOlderThan")
    failure(api.get(CM, params={"watch": "true", "labelSelector": "a in (b"}), 400, "BadRequest", "labelSelector")
    failure(api.get(CM, params={"watch": "true", "fieldSelector": "spec.x=y"}), 400, "BadRequest", "spec.x")
    failure(api.get(CM, params={"watch": "true", "timeoutSeconds": "soon"}), 400, "BadRequest", "timeoutSeconds")


def test_tokens_decide_who_may_do_what(served: Served, api: httpx.Client) -> None:
    before = stored(api)
    with served.client(token=None) as anonymous:
        for method, path in (("GET", CM), ("POST", CM), ("GET", "/api"), ("GET", "/apis"), ("GET", "/openapi/v3"),
                             ("DELETE", f"{CM}/x"), ("GET", f"{CM}?watch=true")):
            failure(anonymous.request(method, path, json=configmap("anon") if method == "POST" else None), 401,
                    "Unauthorized", "bearer token is required")
        assert anonymous.get("/version").status_code == 200  # public, as kube-apiserver's /version
    for token in ("wrong", "tmr_0000_not-a-real-token", "tsa.bad-input.0000"):
        with served.client(token=token) as stranger:
            failure(stranger.get(CM), 401, "Unauthorized", "not valid")
            failure(stranger.post(CM, json=configmap("stranger")), 401, "Unauthorized")
    with served.client(token=None, headers={"Authorization": "Basic dXNlcjpwYXNz"}) as basic:
        failure(basic.get(CM), 401, "Unauthorized")
    # The CA is the home's own: a client trusting only the public roots does not reach the server.
    endpoint = read_endpoint(kubeconfig_path(served.home))
    with pytest.raises(httpx.ConnectError):
        httpx.get(endpoint.server + "/version", verify=ssl.create_default_context(), timeout=10)

    tokens = TokenStore(served.home)
    editor_of_a = tokens.create("edit", ["a"])
    viewer = tokens.create("view")
    with served.client(token=editor_of_a) as editor:
        created = editor.post("/api/v1/namespaces/a/configmaps", json=configmap("allowed"))
        assert created.status_code == 201, created.text
        status = failure(editor.post(CM, json=configmap("not-here")), 403, "Forbidden", f'namespace "{NS}"',
                         "create")
        assert status["details"]["kind"] == "configmaps"
        failure(editor.get(CM), 403, "Forbidden", NS)
        failure(editor.get("/api/v1/configmaps"), 403, "Forbidden", "cluster scope")
        failure(editor.delete("/api/v1/namespaces/b/configmaps/x"), 403, "Forbidden", '"b"')
        failure(editor.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": "grab"}}), 403, "Forbidden")
    with served.client(token=viewer) as view:
        assert view.get(CM).status_code == 200
        assert view.get("/api/v1/namespaces/a/configmaps/allowed").status_code == 200
        failure(view.post(CM, json=configmap("viewer")), 403, "Forbidden", "cannot create")
        failure(view.put("/api/v1/namespaces/a/configmaps/allowed", json=configmap("allowed", a="1")), 403,
                "Forbidden", "cannot update")
        failure(view.patch("/api/v1/namespaces/a/configmaps/allowed", json={"data": {"a": "1"}},
                           headers={"content-type": "application/merge-patch+json"}), 403, "Forbidden", "cannot patch")
        failure(view.delete("/api/v1/namespaces/a/configmaps/allowed"), 403, "Forbidden", "cannot delete")
        failure(view.delete(CM), 403, "Forbidden", "cannot deletecollection")
    assert stored(api) == before
    assert api.get("/api/v1/namespaces/a/configmaps/allowed").json()["data"] == {}
    assert api.get("/api/v1/namespaces/b/configmaps/x").status_code == 404


def test_methods_a_resource_does_not_take_are_405(api: httpx.Client) -> None:
    assert api.post(CM, json=configmap("fixed")).status_code == 201
    before = stored(api)
    for method, path, body in (("PUT", CM, configmap("x")), ("PATCH", CM, {}), ("POST", f"{CM}/fixed", configmap("x")),
                               ("OPTIONS", CM, None), ("POST", "/apis", {}), ("POST", "/api", {}),
                               ("DELETE", "/version", None), ("PUT", "/openapi/v3", {}),
                               ("POST", f"/api/v1/namespaces/{NS}/events", {}),
                               ("POST", "/api/v1/configmaps", configmap("x"))):
        failure(api.request(method, path, json=body), 405, "MethodNotAllowed")
    # Trimaran's own CRDs are read-only (users' CRDs are not: tests/server/test_user_crd.py).
    failure(api.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/tfjobs.kubeflow.org"), 403,
            "Forbidden", "read-only")
    assert stored(api) == before


def test_what_clients_rely_on_when_a_request_succeeds(api: httpx.Client) -> None:
    created = api.post(CM, json=configmap("shape", a="1"))
    assert created.status_code == 201
    obj = created.json()
    assert obj["kind"] == "ConfigMap" and obj["apiVersion"] == "v1" and obj["data"] == {"a": "1"}
    meta = obj["metadata"]
    assert meta["namespace"] == NS and meta["uid"] and meta["resourceVersion"] and meta["creationTimestamp"]
    assert api.get(f"{CM}/shape").json() == obj

    # Unknown fields are dropped with a Warning header, which carries ASCII only whatever they are named.
    odd = api.post(CM, json={**configmap("odd"), "\u00fcber\U0001f600\n": 1, "plain": 2})
    assert odd.status_code == 201 and "plain" not in odd.json()
    warning = odd.headers["warning"]
    assert warning.isascii() and 'unknown field \\"plain\\"' in warning and "\\xfcber\\U0001f600\\n" in warning

    # dryRun=All answers as a real write would and stores nothing.
    before = stored(api)
    dry = api.post(CM, params={"dryRun": "All"}, json=configmap("dry", a="1"))
    assert dry.status_code == 201 and dry.json()["metadata"]["name"] == "dry"
    dry_tf = api.post(TF, params={"dryRun": "All"}, json=tfjob("dry"))
    assert dry_tf.status_code == 201 and dry_tf.json()["kind"] == "TFJob"
    assert api.put(f"{CM}/shape", params={"dryRun": "All"}, json={**obj, "data": {"a": "2"}}).status_code == 200
    assert api.patch(f"{CM}/shape", params={"dryRun": "All"}, json={"data": {"a": "3"}},
                     headers={"content-type": "application/merge-patch+json"}).json()["data"] == {"a": "3"}
    assert api.request("DELETE", f"{CM}/shape", params={"dryRun": "All"}).status_code == 200
    assert stored(api) == before
    failure(api.get(f"{CM}/dry"), 404, "NotFound")
    assert api.get(f"{CM}/shape").json()["data"] == {"a": "1"}

    # Creating the same name twice: 409 AlreadyExists (kubectl apply tells it from Conflict).
    status = failure(api.post(CM, json=configmap("shape", a="other")), 409, "AlreadyExists", '"shape" already exists')
    assert status["details"] == {"name": "shape", "kind": "configmaps"}
    assert api.post(TF, json=tfjob("twice")).status_code == 201
    failure(api.post(TF, json=tfjob("twice")), 409, "AlreadyExists", 'tfjobs.kubeflow.org "twice"')

    # An update from a stale read: 409 Conflict, and the newer write stays.
    stale = api.get(f"{CM}/shape").json()
    newer = api.put(f"{CM}/shape", json={**stale, "data": {"a": "newer"}})
    assert newer.status_code == 200
    assert int(newer.json()["metadata"]["resourceVersion"]) > int(stale["metadata"]["resourceVersion"])
    status = failure(api.put(f"{CM}/shape", json={**stale, "data": {"a": "stale"}}), 409, "Conflict",
                     "the object has been modified")
    assert status["details"]["name"] == "shape"
    assert api.get(f"{CM}/shape").json()["data"] == {"a": "newer"}
    failure(api.request("DELETE", f"{CM}/shape", json={"preconditions": {"resourceVersion": stale["metadata"][
        "resourceVersion"]}}), 409, "Conflict", "resourceVersion")
    failure(api.put(f"{CM}/never-created", json=configmap("never-created")), 404, "NotFound", '"never-created"')

    # DELETE answers a Success Status naming what went; the object is gone; a second DELETE is 404.
    gone = api.delete(f"{CM}/shape")
    assert gone.status_code == 200
    assert gone.json()["status"] == "Success" and gone.json()["details"]["uid"] == meta["uid"]
    failure(api.get(f"{CM}/shape"), 404, "NotFound")
    status = failure(api.delete(f"{CM}/shape"), 404, "NotFound", '"shape" not found')
    assert status["details"]["name"] == "shape" and status["details"]["kind"] == "configmaps"
    failure(api.delete(f"{TF}/never"), 404, "NotFound", 'tfjobs.kubeflow.org "never" not found')


def test_a_watch_from_before_the_compacted_log_is_410(tmp_path: Path) -> None:
    """A client resuming a watch at a revision the change log dropped must list again (410 Expired)."""
    from trimaran.server.daemon import start_server, stop_server
    from trimaran.store import open_store

    home = tmp_path / "home"
    start_server(home=home)
    try:
        served = Served(home)
        with served.client() as api:
            first = api.post(CM, json=configmap("w0")).json()["metadata"]["resourceVersion"]
            for i in range(1, 4):
                assert api.post(CM, json=configmap(f"w{i}")).status_code == 201
            # Resuming from a revision the log still holds replays what came after it.
            with api.stream("GET", CM, params={"watch": "true", "resourceVersion": first,
                                               "timeoutSeconds": "1"}) as resumed:
                events = [json.loads(line) for line in resumed.iter_lines() if line]
            assert [e["object"]["metadata"]["name"] for e in events] == ["w1", "w2", "w3"]
        stop_server(home)
        store = open_store(home / "trimaran.db")
        try:
            assert store.compact(keep_revisions=1) > int(first)
        finally:
            store.close()
        start_server(home=home)
        with served.client() as api:
            failure(api.get(CM, params={"watch": "true", "resourceVersion": first, "timeoutSeconds": "5"}),
                    410, "Expired", "too old resource version", first)
            # A list gives the revision to watch from now.
            now = api.get(CM).json()["metadata"]["resourceVersion"]
            with api.stream("GET", CM, params={"watch": "true", "resourceVersion": now,
                                               "timeoutSeconds": "1"}) as fresh:
                assert fresh.status_code == 200
                assert [line for line in fresh.iter_lines() if line] == []
    finally:
        _stop(home)


def test_our_own_routes_answer_bad_bodies_with_a_status(api: httpx.Client) -> None:
    path = "/trimaran/v1/namespaces/bad-input/trials/t1/observations"
    status = failure(api.post(path, json={"observations": [{"metric": "loss", "value": "high"}]}), 400,
                     "BadRequest", "observations.0.value")
    assert status["details"]["causes"][0]["field"] == "observations.0.value"
    failure(api.post(path, content=b"{not json", headers={"content-type": "application/json"}), 400, "BadRequest")


def test_a_resource_version_ahead_of_the_store_is_too_large(api: httpx.Client) -> None:
    current = int(api.get(CM).json()["metadata"]["resourceVersion"])
    ahead = str(current + 1_000_000)
    started = time.monotonic()
    # A watch: one ERROR event with kube-apiserver's Status, after waiting (up to ~3 s) for the store.
    with api.stream("GET", CM, params={"watch": "true", "resourceVersion": ahead, "timeoutSeconds": "60"}) as answer:
        events = [json.loads(line) for line in answer.iter_lines() if line]
    assert time.monotonic() - started < 30, "answered, not left open until timeoutSeconds"
    assert [e["type"] for e in events] == ["ERROR"], events
    status = events[0]["object"]
    assert (status["code"], status["reason"]) == (504, "Timeout")
    assert status["message"].startswith(f"Timeout: Too large resource version: {ahead}, current: ")
    assert status["details"]["causes"] == [{"reason": "ResourceVersionTooLarge",
                                            "message": "Too large resource version"}]
    # A list not older than it: the same Status as the answer.
    for params in ({"resourceVersion": ahead, "resourceVersionMatch": "NotOlderThan"}, {"resourceVersion": ahead}):
        body = failure(api.get(CM, params=params), 504, "Timeout", "Too large resource version")
        assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    # A version the store has: served at once, as before.
    assert api.get(CM, params={"resourceVersion": str(current), "resourceVersionMatch": "NotOlderThan"}
                   ).status_code == 200


def test_an_apply_without_a_resource_version_is_not_refused_for_a_racing_write(served: Served) -> None:
    """As kube-apiserver's update loop: a server-side apply that names no resourceVersion is merged
    again into what a concurrent writer (a controller's status, here a labeller) left; one that
    names a stale resourceVersion is a 409."""
    with served.client() as api:
        assert api.post(TF, json=tfjob("raced")).status_code == 201
    stop = threading.Event()

    def label() -> int:
        writes = 0
        with served.client() as other:
            while not stop.is_set():
                response = other.patch(f"{TF}/raced", json={"metadata": {"labels": {"n": str(writes)}}},
                                       headers={"content-type": "application/merge-patch+json"})
                assert response.status_code == 200, response.text
                writes += 1
                stop.wait(0.005)  # a busy controller's pace (200 writes/s), not a tight loop that starves any writer
        return writes

    applied = json.dumps({**tfjob("raced"), "metadata": {"name": "raced", "annotations": {"x": "1"}}})
    with ThreadPoolExecutor(max_workers=1) as pool, served.client() as api:
        labeller = pool.submit(label)
        try:
            codes = [api.patch(f"{TF}/raced", params={"fieldManager": "e2e"}, content=applied.encode(),
                               headers={"content-type": "application/apply-patch+yaml"}).status_code
                     for _ in range(60)]
        finally:
            stop.set()
        assert labeller.result() > 0
        assert codes == [200] * 60, codes
        stale = api.get(f"{TF}/raced").json()["metadata"]["resourceVersion"]
        api.patch(f"{TF}/raced", json={"metadata": {"labels": {"n": "moved"}}},
                  headers={"content-type": "application/merge-patch+json"})
        pinned = json.dumps({**json.loads(applied), "metadata": {"name": "raced", "resourceVersion": stale}})
        failure(api.patch(f"{TF}/raced", params={"fieldManager": "e2e"}, content=pinned.encode(),
                          headers={"content-type": "application/apply-patch+yaml"}), 409, "Conflict")
        # A merge patch naming a resourceVersion is an optimistic lock too.
        failure(api.patch(f"{TF}/raced", json={"metadata": {"resourceVersion": stale, "labels": {"n": "late"}}},
                          headers={"content-type": "application/merge-patch+json"}), 409, "Conflict", "modified")
        assert api.get(f"{TF}/raced").json()["metadata"]["labels"]["n"] == "moved"
