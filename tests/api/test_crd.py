"""``api/crd.py`` without a server: a CRD's checks and an object's pruning, defaulting and
validation by a structural schema, in apiextensions-apiserver's words."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from trimaran.api import ManifestError, kinds, validate
from trimaran.api.crd import default, kind_infos, prune, schema_errors, served_as, structural_errors

SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "spec": {"type": "object", "required": ["size"], "properties": {
        "size": {"x-kubernetes-int-or-string": True},
        "mode": {"type": "string", "default": "fast", "enum": ["fast", "slow"]},
        "ports": {"type": "array", "maxItems": 2, "items": {"type": "object", "properties": {
            "port": {"type": "integer", "exclusiveMinimum": True, "minimum": 0}, "name": {"type": "string",
                                                                                   "default": "http"}}}},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}},
        "nested": {"type": "object", "default": {}, "properties": {"depth": {"type": "integer", "default": 2}}},
        "optional": {"type": "string", "nullable": True}}}}}


def crd(**spec: Any) -> dict[str, Any]:
    base = {"group": "test.io", "scope": "Namespaced", "names": {"plural": "things", "kind": "Thing"},
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": copy.deepcopy(SCHEMA)}}]}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.test.io"}, "spec": {**base, **spec}}


def messages(errors: list) -> list[str]:
    return [str(e) for e in errors]


def test_structural_errors_name_the_schema_field() -> None:
    schema = {"type": "object", "properties": {
        "spec": {"properties": {"list": {"type": "array"}, "any": {"type": "object", "$ref": "#/x"}}},
        "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
        "status": {"type": "object", "x-kubernetes-int-or-string": True}}}
    assert messages(structural_errors(schema, "s")) == [
        "s.properties[spec].type: Required value: must not be empty for specified object fields",
        "s.properties[spec].properties[list].items: Required value: must be specified",
        "s.properties[spec].properties[any].$ref: Forbidden: $ref is not supported",
        's.properties[status].type: Invalid value: "object": must be empty if x-kubernetes-int-or-string is true',
        "s.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but "
        "metadata is implicitly specified"]
    assert messages(structural_errors({"type": "string"}, "s")) == [
        's.type: Invalid value: "string": must be object at the root']
    assert messages(structural_errors({"type": "object", "properties": {"a": {"type": "integer", "default": "x"}}},
                                      "s")) == [
        's.properties[a].default: Invalid value: "string": s.properties[a].default in body must be of type '
        'integer: "string"']


def test_prune_default_and_validate_as_apiextensions() -> None:
    body = {"spec": {"size": "10Gi", "ports": [{"port": 80, "junk": 1}], "junk": True, "optional": None,
                     "labels": {"a": "b"}}, "junk": {}}
    pruned: list[str] = []
    prune(body, SCHEMA, "", pruned, root=True)
    assert pruned == ["spec.ports[0].junk", "spec.junk", "junk"]
    default(body, SCHEMA)
    assert body["spec"]["mode"] == "fast" and body["spec"]["ports"] == [{"port": 80, "name": "http"}]
    assert body["spec"]["nested"] == {"depth": 2} and body["spec"]["optional"] is None
    assert schema_errors(body, SCHEMA, "") == []
    bad = {"spec": {"size": 1.5, "mode": "warp", "ports": [{"port": 0}, {}, {}], "labels": {"k": "long"}}}
    assert messages(schema_errors(bad, SCHEMA, "")) == [
        'spec.size: Invalid value: "number": spec.size in body must be of type integer-or-string: "number"',
        'spec.mode: Unsupported value: "warp": supported values: "fast", "slow"',
        "spec.ports: Invalid value: 3: spec.ports in body should have at most 2 items",
        "spec.ports[0].port: Invalid value: 0: spec.ports[0].port in body should be greater than 0",
        "spec.labels.k: Too long: may not be more than 3 bytes"]
    assert messages(schema_errors({"spec": {}}, SCHEMA, "")) == ["spec.size: Required value"]


def test_a_crd_is_defaulted_and_checked() -> None:
    stored = validate(crd()).object
    assert stored["spec"]["names"]["singular"] == "thing" and stored["spec"]["names"]["listKind"] == "ThingList"
    assert stored["spec"]["conversion"] == {"strategy": "None"}
    two = crd(versions=[{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": SCHEMA}},
                        {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": SCHEMA}}],
              group="nodot", scope="Global")
    with pytest.raises(ManifestError) as refused:
        validate(two)
    text = str(refused.value)
    for words in ('spec.group: Invalid value: "nodot": should be a domain with at least one dot',
                  'metadata.name: Invalid value: "things.test.io": must be spec.names.plural+"."+spec.group',
                  'spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"',
                  'spec.versions[1].name: Duplicate value: "v1"',
                  "must have exactly one version marked as storage version"):
        assert words in text, text


def test_protected_groups_need_the_api_approval_annotation() -> None:
    gateway = crd(group="gateway.networking.k8s.io")
    gateway["metadata"]["name"] = "things.gateway.networking.k8s.io"
    with pytest.raises(ManifestError) as refused:
        validate(gateway)
    assert "metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval " \
        'annotation "api-approved.kubernetes.io", see https://github.com/kubernetes/enhancements/pull/1111' \
        in str(refused.value)
    gateway["metadata"]["annotations"] = {"api-approved.kubernetes.io": "https://github.com/kubernetes/kubernetes/pull/1"}
    assert validate(gateway).object["spec"]["group"] == "gateway.networking.k8s.io"
    own = crd(group="networking.k8s.io")
    own["metadata"] = {"name": "things.networking.k8s.io", "annotations": {"api-approved.kubernetes.io": "x"}}
    with pytest.raises(ManifestError, match="spec.group: Forbidden: networking.k8s.io is one of Kubernetes' own"):
        validate(own)


def test_a_crd_may_not_take_a_kind_or_resource_trimaran_serves() -> None:
    taken = crd(group="kubeflow.org", names={"plural": "tfjobs", "kind": "TFJob"})
    taken["metadata"]["name"] = "tfjobs.kubeflow.org"
    with pytest.raises(ManifestError, match="Trimaran's own CustomResourceDefinition, which is read-only"):
        validate(taken)
    with pytest.raises(ManifestError, match='spec.names.kind: Invalid value: "Job": the kind is already served'):
        validate(crd(names={"plural": "things", "kind": "Job"}))


def test_objects_of_a_registered_version_are_stored_in_the_storage_version() -> None:
    definition = validate(crd(versions=[
        {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": SCHEMA}},
        {"name": "v2", "served": True, "storage": False,
         "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}])).object
    infos = kind_infos(definition)
    assert [i.api_version for i in infos] == ["test.io/v2", "test.io/v1"]  # v2 is preferred, v1 stores
    for info in infos:
        kinds.register(info)
    try:
        result = validate({"apiVersion": "test.io/v2", "kind": "Thing", "metadata": {"name": "t"},
                           "spec": {"anything": 1}})
        # Stored in v1, pruned by v1's schema; read, it is defaulted by it too.
        assert result.object["apiVersion"] == "test.io/v1" and result.object["spec"] == {}
        assert served_as(infos[0], result.object)["spec"] == {"mode": "fast", "nested": {"depth": 2}}
        assert result.warnings == []
        with pytest.raises(ManifestError, match="spec.size: Required value"):
            validate({"apiVersion": "test.io/v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": {}})
    finally:
        for info in infos:
            kinds.unregister(info)
    with pytest.raises(ManifestError, match='no matches for kind "Thing"'):
        validate({"apiVersion": "test.io/v1", "kind": "Thing", "metadata": {"name": "t"}})


def test_x_kubernetes_validations_are_evaluated_by_cel() -> None:
    schema = {"type": "object", "x-kubernetes-validations": [
        {"rule": "self.metadata.name.startsWith('ok')", "message": "name must start with ok"}],
        "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
            {"rule": "self.min <= self.max", "messageExpression": "'min ' + string(self.min) + ' > max'"},
            {"rule": "!has(self.locked) || self.locked == oldSelf.locked", "fieldPath": ".locked",
             "reason": "FieldValueForbidden", "message": "locked is immutable"},
            {"rule": "self.name.lowerAscii() == self.name"}],  # Kubernetes' own function: not enforced here
            "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}, "name": {"type": "string"},
                           "locked": {"type": "boolean"},
                           "tags": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [
                               {"rule": "size(self) <= 3"}]}}}}}}
    definition = crd()
    definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = schema
    [info] = kind_infos(validate(definition).object)
    kinds.register(info)
    try:
        def thing(object_name: str, **spec: Any) -> dict[str, Any]:
            return {"apiVersion": "test.io/v1", "kind": "Thing", "metadata": {"name": object_name}, "spec": spec}

        with pytest.raises(ManifestError) as refused:
            validate(thing("bad", min=3, max=2, name="A", tags=["ab", "long"]))
        assert messages(refused.value.field_errors) == [
            '<nil>: Invalid value: "object": name must start with ok',
            'spec: Invalid value: "object": min 3 > max',
            'spec.tags[1]: Invalid value: "string": failed rule: size(self) <= 3']
        old = validate(thing("ok", min=1, max=2, locked=True)).object
        assert info.model.update_errors(old, validate(thing("ok", min=1, max=3, locked=True)).object) == []
        assert messages(info.model.update_errors(old, validate(thing("ok", min=1, max=2, locked=False)).object)) \
            == ["spec.locked: Forbidden: locked is immutable"]
    finally:
        kinds.unregister(info)
    broken = crd()
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = [{"rule": "self.("},
                                                                                              {"message": "m"}]
    with pytest.raises(ManifestError) as refused:
        validate(broken)
    text = str(refused.value)
    assert "openAPIV3Schema.x-kubernetes-validations[0].rule: Invalid value: \"self.(\": compilation failed" in text
    assert "openAPIV3Schema.x-kubernetes-validations[1].rule: Required value" in text


def test_formats_and_defaults_on_read() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "when": {"type": "string", "format": "date-time"}, "id": {"type": "string", "format": "uuid"},
        "every": {"type": "string", "format": "duration"}, "ip": {"type": "string", "format": "ipv4"}}}}}
    assert messages(schema_errors({"spec": {"when": "2024-05-01T12:00:00Z", "id": "7f0c6c1e-0b7a-4c1e-9d1a-"
                                           "0123456789ab", "every": "1h30m", "ip": "10.0.0.1"}}, schema, "")) == []
    assert messages(schema_errors({"spec": {"when": "yesterday", "every": "1 hour", "ip": "::1"}}, schema, "")) == [
        'spec.when: Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday"',
        'spec.every: Invalid value: "1 hour": spec.every in body must be of type duration: "1 hour"',
        'spec.ip: Invalid value: "::1": spec.ip in body must be of type ipv4: "::1"']
    definition = validate(crd()).object
    later = copy.deepcopy(definition)
    later["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["added"] = {
        "type": "string", "default": "later"}
    [before], [after] = kind_infos(definition), kind_infos(later)
    stored = {"apiVersion": "test.io/v1", "kind": "Thing", "metadata": {"name": "t"},
              "spec": {"size": 1, "mode": "slow", "nested": {"depth": 2}}}
    assert served_as(before, stored) is stored  # nothing to default: the stored object itself
    assert served_as(after, stored)["spec"]["added"] == "later" and "added" not in stored["spec"]


def test_list_types_refuse_duplicates() -> None:
    schema = {"type": "object", "properties": {
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                  "items": {"type": "object", "properties": {"port": {"type": "integer"},
                                                             "name": {"type": "string"}}}}}}
    assert schema_errors({"tags": ["a", "b"], "ports": [{"port": 1}, {"port": 2}]}, schema, "") == []
    assert messages(schema_errors({"tags": ["a", "a"], "ports": [{"port": 1}, {"port": 1, "name": "x"}]}, schema,
                                  "")) == ['tags[1]: Duplicate value: "a"', 'ports[1]: Duplicate value: "object"']


def test_any_of_one_of_and_not_as_kube_openapi_words_them() -> None:
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "size": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string",
                                                                                      "pattern": "^[0-9]+Gi$"}]},
        "mode": {"type": "string", "oneOf": [{"enum": ["a", "b"]}, {"enum": ["b", "c"]}]},
        "name": {"type": "string", "not": {"enum": ["forbidden"]}}}}}}
    assert schema_errors({"spec": {"size": 3, "mode": "a", "name": "ok"}}, schema, "") == []
    assert messages(schema_errors({"spec": {"size": "3Mi", "mode": "b", "name": "forbidden"}}, schema, "")) == [
        '<nil>: Invalid value: "": "spec.size" must validate at least one schema (anyOf)',
        "spec.size: Invalid value: \"3Mi\": spec.size in body should match '^[0-9]+Gi$'",
        '<nil>: Invalid value: "": "spec.mode" must validate one and only one schema (oneOf). Found 2 valid '
        'alternatives',
        '<nil>: Invalid value: "": "spec.name" must not validate the schema (not)']


SHARED_SCHEMAS = Path("/work/shared/schemas")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not SHARED_SCHEMAS.exists(), reason="the upstream CRDs are kept in shared/schemas")
def test_upstream_crds_and_the_repositorys_manifests_of_their_kinds_are_accepted() -> None:
    """Kubeflow's own CRDs, applied as a user's (group and kind renamed), pass the CRD checks, and every
    manifest of this repository of their kinds passes their schemas, rules included."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    registered: dict[tuple[str, str], list] = {}
    try:
        for path in sorted(SHARED_SCHEMAS.rglob("*.yaml")):
            for doc in yaml.load_all(path.read_text(), Loader=loader):
                if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec, names = doc["spec"], doc["spec"]["names"]
                original = (spec["group"], names["kind"])
                if original in registered:
                    continue  # a second CRD of one kind (mpi-operator's MPIJob beside the training operator's)
                doc["spec"]["names"] = {"kind": "X" + names["kind"], "plural": "x" + names["plural"]}
                spec["group"] = "x." + spec["group"]
                doc["metadata"] = {"name": f"x{names['plural']}.{spec['group']}"}
                doc.pop("status", None)
                registered[original] = kind_infos(validate(doc).object)
                for info in registered[original]:
                    kinds.register(info)
        checked = 0
        for path in [*(REPO / "examples").rglob("*.yaml"), *(REPO / "tests").rglob("*.yaml")]:
            try:
                docs = list(yaml.load_all(path.read_text(), Loader=loader))
            except yaml.YAMLError:
                continue
            for doc in docs:
                if not isinstance(doc, dict) or "/" not in str(doc.get("apiVersion", "")):
                    continue
                group, version = doc["apiVersion"].split("/")
                infos = registered.get((group, doc.get("kind")))
                if not infos or not any(i.version == version for i in infos):
                    continue
                renamed = {**copy.deepcopy(doc), "apiVersion": f"x.{group}/{version}", "kind": "X" + doc["kind"]}
                renamed.setdefault("metadata", {}).setdefault("name", "x")
                validate(renamed)
                checked += 1
        assert checked >= 20, checked
    finally:
        for infos in registered.values():
            for info in infos:
                kinds.unregister(info)
