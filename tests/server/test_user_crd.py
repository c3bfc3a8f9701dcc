"""A user's CustomResourceDefinition, through the real kubectl and the real ``kubernetes`` Python
client, against a real control plane: the CRD is stored, established and served at once (discovery,
OpenAPI for ``kubectl explain``, printer columns, status and scale subresources, schema validation
with kube-apiserver's words, defaults, pruning), and deleting it deletes its objects."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.server.sdk import run_client

KUBECTL = shutil.which("kubectl")

plane = shared_plane("crd")


def crd(kind: str, plural: str, group: str = "example.com", scope: str = "Namespaced") -> str:
    """A CRD with two served versions (v1 stored), both subresources, printer columns and a schema
    with a default, an enum, bounds, a pattern, a required field and an open field."""
    return yaml.safe_dump({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": scope,
                 "names": {"plural": plural, "singular": kind.lower(), "kind": kind,
                           "shortNames": [plural[:2] + "x"]},
                 "versions": [
                     {"name": "v1", "served": True, "storage": True,
                      "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                                "statusReplicasPath": ".status.replicas"}},
                      "additionalPrinterColumns": [
                          {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                          {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                          {"name": "Ready", "type": "integer", "jsonPath": ".status.ready", "priority": 1},
                          {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
                      "schema": {"openAPIV3Schema": {
                          "type": "object", "description": f"A {kind} of the tests.",
                          "properties": {
                              "spec": {"type": "object", "description": "What it should be.",
                                       "required": ["color"], "properties": {
                                           "replicas": {"type": "integer", "minimum": 0, "maximum": 10,
                                                        "default": 1, "description": "How many there are."},
                                           "color": {"type": "string", "enum": ["red", "blue"]},
                                           "label": {"type": "string", "pattern": "^[a-z]+$"},
                                           "extra": {"type": "object",
                                                     "x-kubernetes-preserve-unknown-fields": True}}},
                              "status": {"type": "object", "properties": {
                                  "replicas": {"type": "integer"}, "ready": {"type": "integer"}}}}}}},
                     {"name": "v1beta1", "served": True, "storage": False, "deprecated": True,
                      "schema": {"openAPIV3Schema": {"type": "object",
                                                     "x-kubernetes-preserve-unknown-fields": True}}}]}})


def cr(kind: str, name: str, version: str = "v1", **spec: object) -> str:
    return json.dumps({"apiVersion": f"example.com/{version}", "kind": kind, "metadata": {"name": name},
                       "spec": spec})


@pytest.fixture
def kubectl(plane, tmp_path):  # noqa: ANN001, ANN201
    if KUBECTL is None:
        pytest.skip("kubectl is installed by .ci/run (Debian's kubernetes-client)")
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kcache"),
               HOME=str(tmp_path))

    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([KUBECTL, *args], env=env, input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run


def test_a_crd_is_established_and_its_kind_served_at_once(kubectl) -> None:  # noqa: ANN001
    assert kubectl("apply", "-f", "-", input=crd("Widget", "widgets")).stdout.strip() == \
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created"
    status = json.loads(kubectl("get", "crd", "widgets.example.com", "-o", "json").stdout)["status"]
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("NamesAccepted", "True", "NoConflicts"), ("Established", "True", "InitialNamesAccepted")]
    assert status["acceptedNames"]["listKind"] == "WidgetList" and status["storedVersions"] == ["v1"]
    # The very next request may use the kind: no wait for a controller.
    kubectl("apply", "-f", "-", input=cr("Widget", "w1", color="red", extra={"free": [1, 2]}))
    got = json.loads(kubectl("get", "widgets", "w1", "-o", "json").stdout)
    assert got["spec"] == {"color": "red", "extra": {"free": [1, 2]}, "replicas": 1}  # defaulted
    assert got["metadata"]["generation"] == 1
    table = kubectl("get", "wix").stdout.splitlines()
    assert table[0].split() == ["NAME", "REPLICAS", "COLOR", "AGE"] and table[1].split()[:3] == ["w1", "1", "red"]
    assert kubectl("get", "widgets", "-o", "wide").stdout.splitlines()[0].split() == \
        ["NAME", "REPLICAS", "COLOR", "READY", "AGE"]
    resources = json.loads(kubectl("get", "--raw", "/apis/example.com/v1").stdout)["resources"]
    assert {r["name"] for r in resources} == {"widgets", "widgets/status", "widgets/scale"}
    group = json.loads(kubectl("get", "--raw", "/apis/example.com").stdout)
    assert group["preferredVersion"]["version"] == "v1"
    assert [v["version"] for v in group["versions"]] == ["v1", "v1beta1"]
    assert "example.com" in kubectl("api-resources", "--api-group=example.com").stdout
    # Conversion None: the other served version answers with its own apiVersion, the object unchanged.
    other = json.loads(kubectl("get", "widgets.v1beta1.example.com", "w1", "-o", "json").stdout)
    assert other["apiVersion"] == "example.com/v1beta1" and other["spec"] == got["spec"]
    # A write in a deprecated version is stored (in the storage version) with apiextensions' warning.
    older = kubectl("apply", "-f", "-", input=cr("Widget", "w2", version="v1beta1", color="blue", free=1))
    assert json.loads(kubectl("get", "widgets.v1beta1.example.com", "w2", "-o", "json").stdout)["spec"] == \
        {"color": "blue", "replicas": 1}
    assert "Warning: example.com/v1beta1 Widget is deprecated; use example.com/v1 Widget" in older.stderr
    stored = json.loads(kubectl("get", "widgets", "w2", "-o", "json").stdout)
    # Stored in v1, it is pruned and defaulted by v1's schema, read in any version.
    assert stored["apiVersion"] == "example.com/v1" and stored["spec"] == {"color": "blue", "replicas": 1}
    assert "status" not in stored  # a custom resource is stored without one until it is written


def test_kubectl_explain_reads_the_crds_schema(kubectl) -> None:  # noqa: ANN001
    kubectl("apply", "-f", "-", input=crd("Sprocket", "sprockets"))
    top = kubectl("explain", "sprockets").stdout
    assert "KIND:       Sprocket" in top and "A Sprocket of the tests." in top
    spec = kubectl("explain", "sprockets.spec").stdout
    assert "How many there are." in spec and "color\t<string> -required-" in spec


def test_objects_are_validated_by_the_structural_schema_in_kube_apiservers_words(kubectl) -> None:  # noqa: ANN001
    kubectl("apply", "-f", "-", input=crd("Gizmo", "gizmos"))
    wrong = kubectl("apply", "-f", "-", input=cr("Gizmo", "g1", replicas="string", color="green", label="AB"),
                    check=False)
    assert wrong.returncode != 0
    for words in ('spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"',
                  'spec.color: Unsupported value: "green": supported values: "red", "blue"',
                  "spec.label: Invalid value: \"AB\": spec.label in body should match '^[a-z]+$'"):
        assert words in wrong.stderr, wrong.stderr
    bounds = kubectl("apply", "-f", "-", input=cr("Gizmo", "g1", replicas=11), check=False).stderr
    assert "spec.color: Required value" in bounds
    assert "spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10" in bounds
    unknown = kubectl("apply", "-f", "-", input=cr("Gizmo", "g1", color="red", bogus=1), check=False).stderr
    assert 'strict decoding error: unknown field "spec.bogus"' in unknown
    assert "NotFound" in kubectl("get", "gizmo", "g1", check=False).stderr  # nothing stored
    # Without strict validation the unknown field is pruned, with a warning.
    kept = kubectl("apply", "--validate=warn", "-f", "-", input=cr("Gizmo", "g1", color="red", bogus=1))
    assert 'unknown field "spec.bogus"' in kept.stderr
    assert json.loads(kubectl("get", "gizmo", "g1", "-o", "json").stdout)["spec"] == {"color": "red", "replicas": 1}
    # A changed CRD is served as changed from the next request on.
    wider = yaml.safe_load(crd("Gizmo", "gizmos"))
    wider["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"][
        "maximum"] = 20
    assert kubectl("apply", "-f", "-", input=yaml.safe_dump(wider)).stdout.strip().endswith("configured")
    kubectl("apply", "-f", "-", input=cr("Gizmo", "g1", color="red", replicas=11))
    assert json.loads(kubectl("get", "gizmo", "g1", "-o", "json").stdout)["spec"]["replicas"] == 11


def test_cel_rules_of_the_schema_are_enforced(kubectl) -> None:  # noqa: ANN001
    ruled = yaml.safe_load(crd("Ranged", "rangeds"))
    spec_schema = ruled["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["properties"]["maxReplicas"] = {"type": "integer"}
    spec_schema["x-kubernetes-validations"] = [
        {"rule": "!has(self.maxReplicas) || self.replicas <= self.maxReplicas",
         "message": "replicas must not exceed maxReplicas"},
        {"rule": "self.color == oldSelf.color", "message": "color is immutable", "fieldPath": ".color"}]
    kubectl("apply", "-f", "-", input=yaml.safe_dump(ruled))
    refused = kubectl("apply", "-f", "-", input=cr("Ranged", "r", color="red", replicas=5, maxReplicas=3),
                      check=False)
    assert 'spec: Invalid value: "object": replicas must not exceed maxReplicas' in refused.stderr, refused.stderr
    kubectl("apply", "-f", "-", input=cr("Ranged", "r", color="red", replicas=3, maxReplicas=3))
    changed = kubectl("apply", "-f", "-", input=cr("Ranged", "r", color="blue", replicas=3, maxReplicas=3),
                      check=False)
    assert 'spec.color: Invalid value: "object": color is immutable' in changed.stderr, changed.stderr


def test_status_and_scale_subresources_and_generation(kubectl) -> None:  # noqa: ANN001
    kubectl("apply", "-f", "-", input=crd("Doohickey", "doohickeys"))
    kubectl("apply", "-f", "-", input=cr("Doohickey", "d1", color="red"))
    assert kubectl("scale", "doohickey/d1", "--replicas=3").stdout.strip() == "doohickey.example.com/d1 scaled"
    obj = json.loads(kubectl("get", "doohickey", "d1", "-o", "json").stdout)
    assert obj["spec"]["replicas"] == 3 and obj["metadata"]["generation"] == 2
    kubectl("patch", "doohickey", "d1", "--subresource=status", "--type=merge",
            "-p", '{"status": {"replicas": 3, "ready": 2}, "spec": {"color": "blue"}}')
    obj = json.loads(kubectl("get", "doohickey", "d1", "-o", "json").stdout)
    # The status subresource writes the status only, and does not move generation.
    assert obj["status"] == {"replicas": 3, "ready": 2} and obj["spec"]["color"] == "red"
    assert obj["metadata"]["generation"] == 2
    scale = json.loads(kubectl("get", "--raw", "/apis/example.com/v1/namespaces/default/doohickeys/d1/scale").stdout)
    assert scale["spec"] == {"replicas": 3} and scale["status"]["replicas"] == 3
    # A spec write keeps the status, bumps generation; merge and JSON patches, not strategic merge.
    kubectl("patch", "doohickey", "d1", "--type=merge", "-p", '{"spec": {"color": "blue"}, "status": {"ready": 0}}')
    kubectl("patch", "doohickey", "d1", "--type=json", "-p",
            '[{"op": "replace", "path": "/spec/replicas", "value": 4}]')
    obj = json.loads(kubectl("get", "doohickey", "d1", "-o", "json").stdout)
    assert obj["spec"]["color"] == "blue" and obj["spec"]["replicas"] == 4 and obj["status"]["ready"] == 2
    assert obj["metadata"]["generation"] == 4
    strategic = kubectl("patch", "doohickey", "d1", "-p", '{"spec": {"color": "red"}}', check=False)
    assert strategic.returncode != 0 and "application/strategic-merge-patch+json is not supported" in strategic.stderr
    assert kubectl("get", "doohickey", "d1", "-o", "wide").stdout.splitlines()[1].split()[:4] == \
        ["d1", "4", "blue", "2"]


def test_a_cluster_scoped_crd(kubectl) -> None:  # noqa: ANN001
    kubectl("apply", "-f", "-", input=crd("Thingamajig", "thingamajigs", scope="Cluster"))
    kubectl("apply", "-f", "-", input=cr("Thingamajig", "t1", color="blue"))
    obj = json.loads(kubectl("get", "thingamajig", "t1", "-o", "json").stdout)
    assert "namespace" not in obj["metadata"] and obj["spec"]["color"] == "blue"
    entry = next(r for r in json.loads(kubectl("get", "--raw", "/apis/example.com/v1").stdout)["resources"]
                 if r["name"] == "thingamajigs")
    assert entry["namespaced"] is False


def test_a_crd_that_is_not_structural_or_misnamed_is_refused(kubectl) -> None:  # noqa: ANN001
    bad = yaml.safe_load(crd("Whatsit", "whatsits"))
    bad["metadata"]["name"] = "x"
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].pop("type")
    bad["spec"]["versions"][1]["storage"] = True
    refused = kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert refused.returncode != 0
    for words in ('metadata.name: Invalid value: "x": must be spec.names.plural+"."+spec.group',
                  "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty "
                  "for specified object fields",
                  "must have exactly one version marked as storage version"):
        assert words in refused.stderr, refused.stderr
    assert "NotFound" in kubectl("get", "crd", "x", check=False).stderr
    typo = yaml.safe_load(crd("Whatsit", "whatsits"))
    typo["spec"]["versions"][0]["printerColumns"] = []
    refused = kubectl("apply", "-f", "-", input=yaml.safe_dump(typo), check=False)
    assert 'strict decoding error: unknown field "spec.versions[0].printerColumns"' in refused.stderr


def test_trimarans_own_crds_stay_read_only(kubectl) -> None:  # noqa: ANN001
    own = json.loads(kubectl("get", "crd", "tfjobs.kubeflow.org", "-o", "json").stdout)
    assert own["status"]["conditions"][0]["type"] == "Established"
    deleted = kubectl("delete", "crd", "tfjobs.kubeflow.org", check=False)
    assert deleted.returncode != 0 and "Forbidden" in deleted.stderr and "read-only" in deleted.stderr
    own["metadata"] = {"name": "tfjobs.kubeflow.org"}
    applied = kubectl("apply", "-f", "-", input=json.dumps(own), check=False)
    assert applied.returncode != 0 and "read-only" in applied.stderr
    names = kubectl("get", "crd", "-o", "name").stdout.split()
    assert "customresourcedefinition.apiextensions.k8s.io/tfjobs.kubeflow.org" in names
    assert names == sorted(names)  # users' and Trimaran's own together, by name


def test_deleting_a_crd_deletes_its_objects(kubectl) -> None:  # noqa: ANN001
    kubectl("apply", "-f", "-", input=crd("Gadget", "gadgets"))
    kubectl("apply", "-f", "-", input=cr("Gadget", "a", color="red"))
    kubectl("apply", "-f", "-", input=cr("Gadget", "b", color="blue"))
    assert len(kubectl("get", "gadgets", "-o", "name").stdout.split()) == 2
    kubectl("delete", "crd", "gadgets.example.com")
    gone = kubectl("get", "--raw", "/apis/example.com/v1/namespaces/default/gadgets", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    assert "gadgets" not in kubectl("get", "--raw", "/apis/example.com/v1").stdout
    # Created again, it starts empty: the old objects went with it.
    kubectl("apply", "-f", "-", input=crd("Gadget", "gadgets"))
    assert kubectl("get", "gadgets", "-o", "name").stdout.split() == []


def test_a_finalizer_holds_an_object_until_it_is_removed(kubectl) -> None:  # noqa: ANN001
    kubectl("apply", "-f", "-", input=crd("Widget2", "widget2s"))
    held = json.loads(cr("Widget2", "f1", color="red"))
    held["metadata"]["finalizers"] = ["example.com/cleanup"]
    kubectl("apply", "-f", "-", input=json.dumps(held))
    kubectl("delete", "widget2", "f1", "--wait=false")
    marked = json.loads(kubectl("get", "widget2", "f1", "-o", "json").stdout)
    assert marked["metadata"]["deletionTimestamp"]
    kubectl("patch", "widget2", "f1", "--type=merge", "-p", '{"metadata": {"finalizers": null}}')
    assert "NotFound" in kubectl("get", "widget2", "f1", check=False).stderr


def test_owner_references_to_and_from_users_objects_are_collected(kubectl) -> None:  # noqa: ANN001
    kubectl("apply", "-f", "-", input=crd("Widget3", "widget3s"))
    owner = json.loads(kubectl("create", "-f", "-", "-o", "json", input=cr("Widget3", "owner", color="red")).stdout)
    ref = {"apiVersion": "example.com/v1", "kind": "Widget3", "name": "owner", "uid": owner["metadata"]["uid"]}
    kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "owned-by-widget", "ownerReferences": [ref]}}))
    holder = json.loads(kubectl("create", "configmap", "holder", "-o", "json").stdout)
    owned = json.loads(cr("Widget3", "owned", color="blue"))
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "holder",
                                             "uid": holder["metadata"]["uid"]}]
    kubectl("create", "-f", "-", input=json.dumps(owned))
    kubectl("delete", "widget3", "owner")
    kubectl("wait", "--for=delete", "configmap/owned-by-widget", "--timeout=60s")
    kubectl("delete", "configmap", "holder")
    kubectl("wait", "--for=delete", "widget3/owned", "--timeout=60s")


PYTHON_CLIENT = r'''
import json
from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException

config.load_kube_config()
api = client.ApiClient()
crds = client.ApiextensionsV1Api(api)
crds.create_custom_resource_definition(json.loads(CRD))
objects = client.CustomObjectsApi(api)
G, V, NS, P = "example.com", "v1", "default", "contraptions"
created = objects.create_namespaced_custom_object(G, V, NS, P, {
    "apiVersion": "example.com/v1", "kind": "Contraption", "metadata": {"name": "c1"}, "spec": {"color": "red"}})
try:
    objects.create_namespaced_custom_object(G, V, NS, P, {
        "apiVersion": "example.com/v1", "kind": "Contraption", "metadata": {"name": "c2"}, "spec": {"replicas": -1}})
    invalid = None
except ApiException as exc:
    invalid = {"status": exc.status, "body": json.loads(exc.body)}
patched = objects.patch_namespaced_custom_object(G, V, NS, P, "c1", {"spec": {"replicas": 5}})
status = objects.patch_namespaced_custom_object_status(G, V, NS, P, "c1", {"status": {"replicas": 5}})
scale = objects.get_namespaced_custom_object_scale(G, V, NS, P, "c1")
listed = objects.list_namespaced_custom_object(G, V, NS, P)
stream = watch.Watch()
watched = []
for event in stream.stream(objects.list_namespaced_custom_object, G, V, NS, P, timeout_seconds=60):
    watched.append([event["type"], event["object"]["metadata"]["name"], event["object"]["spec"]["replicas"]])
    stream.stop()
dyn = dynamic.DynamicClient(api)
resource = dyn.resources.get(api_version="example.com/v1", kind="Contraption")
dyn_obj = resource.get(name="c1", namespace=NS)
resource.patch(name="c1", namespace=NS, body={"spec": {"color": "blue"}}, content_type="application/merge-patch+json")
after = objects.get_namespaced_custom_object(G, V, NS, P, "c1")
crd_status = crds.read_custom_resource_definition("contraptions.example.com").status
crds.delete_custom_resource_definition("contraptions.example.com")
try:
    objects.get_namespaced_custom_object(G, V, NS, P, "c1")
    gone = None
except ApiException as exc:
    gone = exc.status
print(json.dumps({"created": created["spec"], "invalid": invalid, "patched": patched["metadata"]["generation"],
                  "status": status["status"], "scale": scale["spec"], "watched": watched,
                  "listed": [o["metadata"]["name"] for o in listed["items"]], "dynamic": dyn_obj.spec.color,
                  "after": after["spec"],
                  "established": [c.type for c in crd_status.conditions], "gone": gone}))
'''


def test_the_python_client_custom_objects_and_dynamic_client(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    definition = json.dumps(yaml.safe_load(crd("Contraption", "contraptions")))
    out = run_client(sys.executable, plane, f"CRD = {definition!r}\n" + PYTHON_CLIENT, tmp_path)
    assert out["created"] == {"color": "red", "replicas": 1}
    assert out["invalid"]["status"] == 422 and out["invalid"]["body"]["reason"] == "Invalid"
    assert out["invalid"]["body"]["message"].startswith('Contraption.example.com "c2" is invalid: ')
    assert [(c["field"], c["message"]) for c in out["invalid"]["body"]["details"]["causes"]] == [
        ("spec.color", "Required value"),
        ("spec.replicas", "Invalid value: -1: spec.replicas in body should be greater than or equal to 0")]
    assert out["patched"] == 2 and out["status"] == {"replicas": 5} and out["scale"] == {"replicas": 5}
    assert out["listed"] == ["c1"] and out["dynamic"] == "red" and out["after"]["color"] == "blue"
    assert out["watched"] == [["ADDED", "c1", 5]]
    assert out["established"] == ["NamesAccepted", "Established"] and out["gone"] == 404


def test_users_crds_survive_a_restart(fresh_plane: ControlPlaneHandle, tmp_path: Path) -> None:
    from trimaran.server.daemon import start_server, stop_server
    from trimaran.store import open_store

    definition = yaml.safe_load(crd("Whirligig", "whirligigs"))
    body = {"apiVersion": "example.com/v1", "kind": "Whirligig", "metadata": {"name": "k"}, "spec": {"color": "red"}}
    script = r'''
import json, sys
from kubernetes import client, config
config.load_kube_config()
api = client.ApiClient()
if sys.argv[1] == "create":
    client.ApiextensionsV1Api(api).create_custom_resource_definition(json.loads(sys.argv[2]))
    client.CustomObjectsApi(api).create_namespaced_custom_object("example.com", "v1", "default", "whirligigs",
                                                                 json.loads(sys.argv[3]))
got = client.CustomObjectsApi(api).get_namespaced_custom_object("example.com", "v1", "default", "whirligigs", "k")
print(json.dumps(got["spec"]))
'''
    assert run_client(sys.executable, fresh_plane, script, tmp_path, "create", json.dumps(definition),
                      json.dumps(body)) == {"color": "red", "replicas": 1}
    stop_server(fresh_plane.home)
    # A stored CRD that no longer passes (its kind is served by Trimaran now) does not stop the start.
    store = open_store(fresh_plane.home / "trimaran.db")
    try:
        clash = yaml.safe_load(crd("TFJob", "tfjobs", group="kubeflow.org"))
        store.create(clash)
    finally:
        store.close()
    start_server(home=fresh_plane.home)
    assert run_client(sys.executable, fresh_plane, script, tmp_path, "read") == {"color": "red", "replicas": 1}
