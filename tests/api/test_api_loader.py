"""The manifest loader: formats, sources, warnings, and located errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.api.builders import FIXTURES, container, pod, pytorchjob, rejection, replica, tfjob
from trimaran.api import Manifest, ManifestError, load_and_validate, load_manifests, validate

POD_YAML = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
    - name: main
      image: python:3.11
"""


def pod_yaml(name: str) -> str:
    return POD_YAML.format(name=name)


# --- formats ------------------------------------------------------------------------------------


def test_multi_document_yaml_with_empty_documents() -> None:
    text = "---\n" + pod_yaml("a") + "---\n---\n# only a comment\n---\n" + pod_yaml("b") + "---\n"
    manifests = load_manifests("pods.yaml", text)
    assert [(m.doc_index, m.object["metadata"]["name"]) for m in manifests] == [(1, "a"), (4, "b")]
    assert manifests[1].location == "pods.yaml (document 4)"
    assert all(m.source_name == "pods.yaml" and m.warnings == [] and m.item_index is None for m in manifests)


def test_empty_source() -> None:
    assert load_manifests("empty.yaml", "") == []
    assert load_and_validate("empty.yaml", "---\n# nothing\n") == []


def test_json_single_object() -> None:
    obj = pod({"containers": [container("c")]})
    [m] = load_and_validate("pod.json", json.dumps(obj, indent=2))
    assert m.object["spec"]["restartPolicy"] == "Always"


def test_json_stream_of_objects() -> None:
    text = (
        json.dumps(pod({"containers": [container("c")]}, name="a"))
        + "\n"
        + json.dumps(pod({"containers": [container("c")]}, name="b"))
    )
    assert [m.object["metadata"]["name"] for m in load_manifests("pods.json", text)] == ["a", "b"]


def test_list_kind() -> None:
    items = [pod({"containers": [container("c")]}, name="a"), tfjob({"Worker": replica([container("tensorflow")])})]
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    manifests = load_and_validate("list.json", text)
    assert [(m.object["kind"], m.item_index) for m in manifests] == [("Pod", 0), ("TFJob", 1)]
    assert manifests[1].location == "list.json (document 1): items[1]"


def test_typed_list_kind_in_yaml() -> None:
    text = "apiVersion: v1\nkind: PodList\nitems:\n" + "".join(
        "- " + pod_yaml(n).replace("\n", "\n  ").rstrip() + "\n" for n in ("a", "b")
    )
    assert [m.object["metadata"]["name"] for m in load_manifests("l.yaml", text)] == ["a", "b"]


def test_list_errors_are_located_by_item() -> None:
    bad = tfjob({"Worker": replica([container("tensorflow")], replicas=-1)})
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod({"containers": [container("c")]}), bad, 3]})
    message = rejection("list.json", text)
    assert message.splitlines() == [
        'list.json (document 1): items[1]: TFJob "mnist": spec.tfReplicaSpecs.Worker.replicas: Invalid value: -1: '
        "must be greater than or equal to 0",
        "list.json (document 1): items[2]: expected an object with apiVersion and kind, got number",
    ]


def test_stdin_with_text() -> None:
    [m] = load_manifests("-", pod_yaml("a"))
    assert m.source_name == "<stdin>"
    [m] = load_manifests("-", json.dumps(pod({"containers": [container("c")]})))
    assert m.object["kind"] == "Pod"


def test_stdin_read_when_no_text(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(pod_yaml("from-stdin")))
    assert load_manifests("-")[0].object["metadata"]["name"] == "from-stdin"


def test_directory_sorted_non_recursive(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text(pod_yaml("b"))
    (tmp_path / "a.yml").write_text(pod_yaml("a"))
    (tmp_path / "c.json").write_text(json.dumps(pod({"containers": [container("c")]}, name="c")))
    (tmp_path / "notes.txt").write_text("not a manifest")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.yaml").write_text(pod_yaml("d"))
    manifests = load_and_validate(tmp_path)
    assert [m.object["metadata"]["name"] for m in manifests] == ["a", "b", "c"]
    assert [Path(m.source_name).name for m in manifests] == ["a.yml", "b.yaml", "c.json"]


def test_directory_problems_from_every_file(tmp_path: Path) -> None:
    (tmp_path / "1.yaml").write_text("a: [1\n")
    (tmp_path / "2.yaml").write_text(pod_yaml("ok"))
    (tmp_path / "3.yaml").write_text(pod_yaml("Bad_Name"))
    with pytest.raises(ManifestError) as info:
        load_and_validate(tmp_path)
    lines = info.value.problems
    assert len(lines) == 2
    assert lines[0].startswith(f"{tmp_path / '1.yaml'} (document 1): invalid YAML at line 2, column 1")
    assert lines[1].startswith(f'{tmp_path / "3.yaml"} (document 1): Pod "Bad_Name": metadata.name: Invalid value')


def test_file_by_path(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(pod_yaml("a"))
    assert load_manifests(path)[0].source_name == str(path)
    assert load_manifests(str(path))[0].object["metadata"]["name"] == "a"


def test_missing_file() -> None:
    with pytest.raises(ManifestError, match="nope.yaml: no such file or directory"):
        load_manifests("/nonexistent/nope.yaml")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ManifestError, match="bin.yaml: not UTF-8 text"):
        load_manifests(path)


def test_utf8_bom_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + pod_yaml("a").encode())
    assert load_manifests(path)[0].object["kind"] == "Pod"


# --- YAML read as Kubernetes reads it -----------------------------------------------------------


def test_timestamps_and_sexagesimal_stay_strings() -> None:
    text = (
        pod_yaml("a")
        + "      env:\n        - {name: WHEN, value: 2026-01-01T00:00:00Z}\n        - {name: T, value: 1:30}\n"
    )
    [m] = load_and_validate("p.yaml", text)
    assert m.object["spec"]["containers"][0]["env"] == [
        {"name": "WHEN", "value": "2026-01-01T00:00:00Z"},
        {"name": "T", "value": "1:30"},
    ]


def test_yaml_numbers_and_octal_modes() -> None:
    text = pod_yaml("a") + "  volumes:\n    - name: v\n      configMap: {name: c, defaultMode: 0644}\n"
    [m] = load_manifests("p.yaml", text)
    assert m.object["spec"]["volumes"][0]["configMap"]["defaultMode"] == 0o644


def test_non_string_keys_become_strings() -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  1: one\n  true: yes\n  ~: x\n  1.5: y\n"
    [m] = load_manifests("p.yaml", text)
    assert m.object["data"] == {"1": "one", "true": True, "null": "x", "1.5": "y"}


def test_complex_keys_rejected() -> None:
    message = rejection("p.yaml", "? [a, b]\n: c\n")
    assert message.startswith("p.yaml (document 1): invalid YAML at line 1")


def test_duplicate_keys_warn() -> None:
    text = pod_yaml("a").replace("kind: Pod\n", "kind: Pod\nkind: Pod\n")
    [m] = load_and_validate("p.yaml", text)
    assert m.warnings == ['duplicate field "kind" at line 3']
    [m] = load_manifests("p.json", '{"apiVersion": "v1", "apiVersion": "v1", "kind": "Pod"}')
    assert m.warnings == ['duplicate field "apiVersion"']


def test_yaml_merge_keys_are_not_duplicates() -> None:
    text = (
        "base: &base {name: c, image: i}\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\n"
        "spec:\n  containers:\n    - <<: *base\n      name: main\n"
    )
    [m] = load_manifests("p.yaml", text)
    assert m.warnings == []
    assert m.object["spec"]["containers"] == [{"name": "main", "image": "i"}]


# --- errors -------------------------------------------------------------------------------------


def test_malformed_yaml_line_and_column() -> None:
    text = pod_yaml("a") + "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: b\n   bad: indent\n"
    message = rejection("pods.yaml", text)
    # libyaml ends the message "in this context", pure-Python PyYAML "here".
    assert message.startswith(
        "pods.yaml (document 2): invalid YAML at line 14, column 7: mapping values are not allowed"
    )


def test_malformed_json_line_and_column() -> None:
    message = rejection("p.json", '{\n  "apiVersion": "v1",\n  "kind": Pod\n}')
    assert message == "p.json (document 1): invalid JSON at line 3, column 11: Expecting value"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- a\n- b\n", "x.yaml (document 1): expected an object with apiVersion and kind, got array"),
        ("just text\n", "x.yaml (document 1): expected an object with apiVersion and kind, got string"),
        ("kind: Pod\n", "x.yaml (document 1): apiVersion: Required value"),
        ("apiVersion: v1\n", "x.yaml (document 1): kind: Required value"),
        ("apiVersion: 1\nkind: Pod\n", "x.yaml (document 1): apiVersion: Invalid value: 1: must be of type string"),
        ("apiVersion: policy/v1beta1\nkind: PodSecurityPolicy\n",
         'x.yaml (document 1): no matches for kind "PodSecurityPolicy" in version "policy/v1beta1". Trimaran runs '
         'these kinds: '),
        ("apiVersion: v1\nkind: Deployment\n", 'x.yaml (document 1): no matches for kind "Deployment" in version "v1" '
                                               "(known versions: apps/v1)"),
        (
            "apiVersion: kubeflow.org/v2\nkind: TFJob\n",
            'x.yaml (document 1): no matches for kind "TFJob" in version "kubeflow.org/v2" '
            "(known versions: kubeflow.org/v1)",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: i}]}\nx: .nan\n",
            "x.yaml (document 1): x: nan is not a valid number (JSON has no NaN or infinity)",
        ),
    ],
)
def test_document_level_errors(text: str, expected: str) -> None:
    assert rejection("x.yaml", text).startswith(expected)


def test_unknown_fields_are_warnings_with_paths() -> None:
    obj = tfjob({"Worker": replica([container("tensorflow", foo=1)], bar=2)}, baz=3)
    obj["metadata"]["colour"] = "blue"
    obj["extra"] = {}
    result = validate(obj)
    assert sorted(result.warnings) == sorted(
        [
            'unknown field "extra"',
            'unknown field "metadata.colour"',
            'unknown field "spec.baz"',
            'unknown field "spec.tfReplicaSpecs.Worker.bar"',
            'unknown field "spec.tfReplicaSpecs.Worker.template.spec.containers[0].foo"',
        ]
    )
    out = result.object
    assert "extra" not in out and "colour" not in out["metadata"] and "baz" not in out["spec"]
    assert "foo" not in out["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def test_snake_case_spelling_is_unknown() -> None:
    # Kubernetes accepts camelCase only; the Python attribute name is not a manifest field.
    result = validate(pytorchjob({"Worker": replica([container("pytorch")])}, nproc_per_node="2"))
    assert result.warnings == ['unknown field "spec.nproc_per_node"']
    assert result.object["spec"]["nprocPerNode"] == "auto"


def test_unknown_field_warnings_through_loader() -> None:
    [m] = load_and_validate("p.yaml", pod_yaml("a") + "      colour: blue\n")
    assert m.warnings == ['unknown field "spec.containers[0].colour"']


def test_namespace_defaults_and_is_kept() -> None:
    assert validate(pod({"containers": [container("c")]})).object["metadata"]["namespace"] == "default"
    obj = pod({"containers": [container("c")]})
    obj["metadata"]["namespace"] = "team-a"
    assert validate(obj).object["metadata"]["namespace"] == "team-a"


def test_validate_does_not_modify_its_input() -> None:
    obj = tfjob({"worker": replica([container("tensorflow")])})
    before = json.dumps(obj, sort_keys=True)
    validate(obj)
    assert json.dumps(obj, sort_keys=True) == before


def test_validated_object_validates_to_itself() -> None:
    first = validate(
        pytorchjob(
            {"Master": replica([container("pytorch")]), "Worker": replica([container("pytorch")])},
            elasticPolicy={"minReplicas": 1},
        )
    ).object
    second = validate(first)
    assert second.object == first and second.warnings == []


def test_whole_file_rejected_listing_every_problem() -> None:
    good = pod_yaml("good")
    bad_replicas = yaml.safe_dump(pytorchjob({"Worker": replica([container("pytorch")], replicas=-1)}, name="x"))
    bad_type = yaml.safe_dump(pytorchjob({"Worker": replica([container("pytorch")], replicas="two")}, name="y"))
    text = "---\n".join([good, bad_replicas, bad_type, "apiVersion: v1\nkind: Gadget\n", "a: [\n"])
    with pytest.raises(ManifestError) as info:
        load_and_validate("job.yaml", text)
    assert info.value.problems == [
        'job.yaml (document 2): PyTorchJob "x": spec.pytorchReplicaSpecs.Worker.replicas: Invalid value: -1: '
        "must be greater than or equal to 0",
        'job.yaml (document 3): PyTorchJob "y": spec.pytorchReplicaSpecs.Worker.replicas: Invalid value: "two": '
        "must be of type integer",
        info.value.problems[2],
        info.value.problems[3],
    ]
    assert info.value.problems[2].startswith('job.yaml (document 4): no matches for kind "Gadget" in version "v1". '
                                             "Trimaran runs these kinds: v1: Pod")
    assert info.value.problems[3].startswith("job.yaml (document 5): invalid YAML at line")
    assert [e.path for e in info.value.field_errors] == ["spec.pytorchReplicaSpecs.Worker.replicas"] * 2
    assert str(info.value) == "\n".join(info.value.problems)


def test_load_manifests_does_not_validate() -> None:
    [m] = load_manifests("x.yaml", "apiVersion: v1\nkind: Gadget\n")
    assert m == Manifest("x.yaml", 1, {"apiVersion": "v1", "kind": "Gadget"}, [])


# --- hostile input ------------------------------------------------------------------------------


def test_alias_bomb_rejected() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    message = rejection("bomb.yaml", "\n".join(lines) + "\n")
    assert message == "bomb.yaml (document 1): document is too large (more than 1000000 values, aliases expanded)"


def test_recursive_alias_rejected() -> None:
    message = rejection("loop.yaml", "a: &a [*a]\n")
    assert "nested more than 100 levels deep" in message


def test_deep_nesting_rejected() -> None:
    message = rejection("deep.json", "[" * 5000 + "]" * 5000)
    assert message.startswith("deep.json (document 1): ")
    message = rejection("deep.yaml", "[" * 5000 + "]" * 5000)
    assert message.startswith("deep.yaml (document 1): ")


def test_fixture_directory_loads() -> None:
    # Every fixture file (the seeds and the Katib trial job) loads and validates as one submission.
    assert len(load_and_validate(FIXTURES)) == len(list(FIXTURES.glob("*.yaml")))
