"""Patches and server-side apply, as pure functions of (live object, patch)."""

from __future__ import annotations

import json

import pytest

from trimaran.server.kube.errors import StatusError
from trimaran.server.kube.patch import (
    apply_patch,
    merge_patch,
    server_side_apply,
    strategic_merge_patch,
    track_update,
)


def _obj(spec: dict, **meta: object) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "a", **meta}, "spec": spec}


def test_merge_patch_follows_rfc_7386() -> None:
    assert merge_patch({"a": "b", "c": {"d": "e", "f": "g"}}, {"a": "z", "c": {"f": None}}) == \
        {"a": "z", "c": {"d": "e"}}
    assert merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}
    assert merge_patch({"a": 1}, {"b": {"c": None}}) == {"a": 1, "b": {}}


def test_json_patch_failure_is_a_422() -> None:
    target = {"metadata": {"labels": {}}}
    assert apply_patch("application/json-patch+json", target,
                       b'[{"op":"add","path":"/metadata/labels/x","value":"y"}]', False)["metadata"]["labels"] == \
        {"x": "y"}
    with pytest.raises(StatusError) as err:
        apply_patch("application/json-patch+json", target, b'[{"op":"test","path":"/metadata/name","value":"q"}]',
                    False)
    assert err.value.code == 422


def test_strategic_merge_is_for_builtin_kinds_and_merges_containers_by_name() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "a", "image": "x"},
                                                                      {"name": "b", "image": "y"}]},
           "metadata": {"finalizers": ["f1"]}}
    patched = strategic_merge_patch(pod, {"spec": {"containers": [{"name": "b", "image": "z"},
                                                                  {"name": "a", "$patch": "delete"}]},
                                          "metadata": {"finalizers": ["f2"]}})
    assert patched["spec"]["containers"] == [{"name": "b", "image": "z"}]
    # A new item goes before the live ones the patch does not name, as apimachinery orders them.
    assert patched["metadata"]["finalizers"] == ["f2", "f1"]
    with pytest.raises(StatusError) as err:
        apply_patch("application/strategic-merge-patch+json", pod, b"{}", builtin=False)
    assert err.value.code == 415
    with pytest.raises(StatusError) as err:
        apply_patch("text/plain", pod, b"{}", builtin=True)
    assert err.value.code == 415


def test_apply_owns_what_it_sets_and_a_repeat_changes_nothing() -> None:
    created = server_side_apply(None, _obj({"x": 1, "runPolicy": {}}), "alice", force=False)
    (entry,) = created["metadata"]["managedFields"]
    assert entry["manager"] == "alice" and entry["operation"] == "Apply"
    assert entry["fieldsV1"] == {"f:spec": {"f:runPolicy": {}, "f:x": {}}}
    again = server_side_apply(created, _obj({"x": 1, "runPolicy": {}}), "alice", force=False)
    assert again == created


def test_apply_removes_only_what_the_manager_dropped_and_nobody_else_owns() -> None:
    live = server_side_apply(None, _obj({"x": 1, "y": 2, "runPolicy": {}}), "alice", force=False)
    live["spec"]["runPolicy"]["cleanPodPolicy"] = "None"  # a default the server added: no one owns it
    out = server_side_apply(live, _obj({"y": 2, "runPolicy": {"suspend": True}}), "alice", force=False)
    assert out["spec"] == {"y": 2, "runPolicy": {"cleanPodPolicy": "None", "suspend": True}}


def test_another_managers_field_with_another_value_conflicts_unless_forced() -> None:
    live = server_side_apply(None, _obj({"x": 1}), "alice", force=False)
    same = server_side_apply(live, _obj({"x": 1}), "bob", force=False)  # same value: shared, no conflict
    assert {e["manager"] for e in same["metadata"]["managedFields"]} == {"alice", "bob"}
    with pytest.raises(StatusError) as err:
        server_side_apply(live, _obj({"x": 2}), "bob", force=False)
    assert err.value.code == 409 and err.value.details["causes"][0]["field"] == ".spec.x"
    forced = server_side_apply(live, _obj({"x": 2}), "bob", force=True)
    assert forced["spec"]["x"] == 2
    assert [e["manager"] for e in forced["metadata"]["managedFields"]] == ["bob"]


def test_keyed_lists_merge_item_by_item_across_managers() -> None:
    def job(containers: list[dict]) -> dict:
        return _obj({"template": {"spec": {"containers": containers}}})

    live = server_side_apply(None, job([{"name": "a", "image": "x"}]), "alice", force=False)
    both = server_side_apply(live, job([{"name": "b", "image": "y"}]), "bob", force=False)
    assert [c["name"] for c in both["spec"]["template"]["spec"]["containers"]] == ["a", "b"]
    fields = json.dumps(both["metadata"]["managedFields"])
    assert 'k:{\\"name\\":\\"b\\"}' in fields


def test_an_update_moves_the_fields_it_changed_to_its_manager() -> None:
    live = server_side_apply(None, _obj({"x": 1, "y": 1}), "alice", force=False)
    new = json.loads(json.dumps(live))
    new["spec"]["x"] = 5
    track_update(live, new, "kubectl-edit")
    owners = {e["manager"]: e["fieldsV1"] for e in new["metadata"]["managedFields"]}
    assert owners == {"alice": {"f:spec": {"f:y": {}}}, "kubectl-edit": {"f:spec": {"f:x": {}}}}
    with pytest.raises(StatusError):
        server_side_apply(new, _obj({"x": 1, "y": 1}), "alice", force=False)


def test_a_services_ports_merge_by_port_and_a_containers_by_container_port() -> None:
    service = {"apiVersion": "v1", "kind": "Service",
               "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}, {"name": "metrics", "port": 9090}]}}
    patched = strategic_merge_patch(service, {"spec": {"ports": [{"port": 80, "targetPort": 8081}]}})
    assert patched["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 8081},
                                        {"name": "metrics", "port": 9090}]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "web"}]}]}}
    patched = strategic_merge_patch(pod, {"spec": {"containers": [{"name": "a", "ports": [
        {"containerPort": 80, "protocol": "TCP"}, {"containerPort": 81}]}]}})
    assert patched["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "name": "web", "protocol": "TCP"},
                                                         {"containerPort": 81}]


def test_strategic_directives_as_apimachinery_applies_them() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {
        "selector": {"matchLabels": {"a": "b"}},
        "template": {"metadata": {"labels": {"a": "b", "c": "d"}}, "spec": {"containers": [
            {"name": "x", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"name": "y", "image": "i"}]}}}}
    # $setElementOrder: the patch's order wins, items it does not name keep their place.
    patched = strategic_merge_patch(deployment, {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "y"}, {"name": "x"}],
        "containers": [{"name": "x", "$setElementOrder/env": [{"name": "B"}, {"name": "A"}]}]}}}})
    containers = patched["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["y", "x"]
    assert [e["name"] for e in containers[1]["env"]] == ["B", "A"]
    # A map replaced whole, a map deleted, a list replaced whole.
    patched = strategic_merge_patch(deployment, {"spec": {"template": {
        "metadata": {"labels": {"$patch": "replace", "e": "f"}},
        "spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "j"}]}}}})
    assert patched["spec"]["template"]["metadata"]["labels"] == {"e": "f"}
    assert patched["spec"]["template"]["spec"]["containers"] == [{"name": "z", "image": "j"}]
    assert strategic_merge_patch(deployment, {"spec": {"template": {"metadata": {"$patch": "delete"}}}}
                                 )["spec"]["template"]["metadata"] == {}
    with pytest.raises(StatusError) as err:
        strategic_merge_patch(deployment, {"spec": {"template": {"spec": {"containers": [{"$patch": "merge"}]}}}})
    assert err.value.code == 500 and err.value.message == "merging lists cannot yet be specified in the patch"
    # A PodDisruptionBudget's selector has the replace strategy: a patch of it is the whole selector.
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "spec": {"selector": {"matchLabels": {"a": "b"}}, "minAvailable": 1}}
    patched = strategic_merge_patch(pdb, {"spec": {"selector": {"matchExpressions": [
        {"key": "k", "operator": "Exists"}]}}})
    assert patched["spec"]["selector"] == {"matchExpressions": [{"key": "k", "operator": "Exists"}]}
