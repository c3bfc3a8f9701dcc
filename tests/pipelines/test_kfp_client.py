"""The real ``kfp.Client`` (SDK 2.17, ``$TRIMARAN_KFP_PYTHON``) against a real control plane's
``/apis/v2beta1``: pipelines and versions, experiments, runs with filters, sorting and pages, archive,
terminate, delete, bad uploads refused with the path, and the token rules.

One script runs every section in one interpreter (importing kfp takes a second or two) and prints
what each saw as JSON; the tests assert on their section.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.pipelines.kfp_corpus import compiled, kfp_python
from tests.server.sdk import run_client

# The client from the kubeconfig as a user would wire it: host, bearer token and the home's CA.
CONNECT = r'''
import base64, json, os, sys, urllib.parse
import yaml
import kfp
from kfp_server_api import ApiException

config = yaml.safe_load(open(os.environ["KUBECONFIG"]))
cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
with open("ca.crt", "wb") as fh:
    fh.write(base64.b64decode(cluster["certificate-authority-data"]))
client = kfp.Client(host=cluster["server"], existing_token=user["token"], ssl_ca_cert="ca.crt")


def refused(call, *args, **kwargs):
    """The HTTP status and KFP error body of a call that must fail."""
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        return {"status": exc.status, "body": json.loads(exc.body or "{}")}
    return {"status": 200}
'''


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    with module_plane(tmp_path_factory, "kfp-client") as handle:
        yield handle


# Each section below leaves what it saw in `out`, kept under its name; one interpreter runs them all.
PIPELINES = r'''
out = {"multi_user": client.get_kfp_healthz().multi_user}
pipeline = client.upload_pipeline(hello, pipeline_name="Hello pipeline", description="greets")
out["pipeline"] = [pipeline.display_name, pipeline.name, pipeline.description]
out["by_name"] = client.get_pipeline_id("Hello pipeline") == pipeline.pipeline_id
out["by_name_path"] = client.pipelines.pipeline_service_get_pipeline_by_name(name="hello-pipeline").pipeline_id \
    == pipeline.pipeline_id
out["again"] = refused(client.upload_pipeline, hello, pipeline_name="Hello pipeline")
second = client.upload_pipeline_version(hello, "second", pipeline_id=pipeline.pipeline_id)
versions = client.list_pipeline_versions(pipeline.pipeline_id, sort_by="display_name desc").pipeline_versions
out["versions"] = [v.display_name for v in versions]
got = client.get_pipeline_version(pipeline.pipeline_id, second.pipeline_version_id)
out["version_spec"] = got.pipeline_spec["pipelineInfo"]["name"]
out["listed"] = [p.display_name for p in client.list_pipelines().pipelines]
out["delete_with_versions"] = refused(client.delete_pipeline, pipeline.pipeline_id)
for version in versions:
    client.delete_pipeline_version(pipeline.pipeline_id, version.pipeline_version_id)
client.delete_pipeline(pipeline.pipeline_id)
out["deleted"] = refused(client.get_pipeline, pipeline.pipeline_id)["status"]
import tarfile, zipfile
with tarfile.open("packed.tar.gz", "w:gz") as tar:
    tar.add(hello, arcname="pipeline.yaml")
with zipfile.ZipFile("packed.zip", "w") as archive:
    archive.write(hello, "pipeline.yaml")
out["archives"] = []
for package in ("packed.tar.gz", "packed.zip"):
    packed = client.upload_pipeline(package, pipeline_name=package.replace(".", "-"))
    version = client.list_pipeline_versions(packed.pipeline_id).pipeline_versions[0]
    out["archives"].append(version.pipeline_spec["pipelineInfo"]["name"])
other = client.upload_pipeline(hello, pipeline_name="Other")
out["same_version_name_elsewhere"] = client.upload_pipeline_version(hello, "second", pipeline_id=other.pipeline_id) \
    .display_name
'''


def test_pipelines_and_versions_through_kfp_client(seen: dict) -> None:
    out = seen["pipelines"]
    assert out["multi_user"] is False
    assert out["pipeline"] == ["Hello pipeline", "hello-pipeline", "greets"]
    assert out["by_name"] and out["by_name_path"]
    assert out["again"]["status"] == 409 and "already exists" in out["again"]["body"]["message"]
    assert out["versions"] == ["second", "hello-pipeline"]  # the upload's own version is named after the pipeline
    assert out["version_spec"] == "hello"
    assert out["listed"] == ["Hello pipeline"]
    assert out["delete_with_versions"]["status"] == 400
    assert "2 version(s)" in out["delete_with_versions"]["body"]["message"]
    assert out["deleted"] == 404
    assert out["same_version_name_elsewhere"] == "second"  # version names are per pipeline, as in KFP
    assert out["archives"] == ["hello", "hello"]  # .tar.gz and .zip packages, as kfp.Client uploads them


RUNS = r'''
out = {}
experiment = client.create_experiment("Nightly", description="every night")
out["same_experiment"] = client.create_experiment("Nightly").experiment_id == experiment.experiment_id
first = client.run_pipeline(experiment.experiment_id, "first", pipeline_package_path=hello, params={"name": "a"})
second = client.create_run_from_pipeline_package(hello, arguments={"name": "b"}, run_name="second").run_id
pipeline = client.upload_pipeline(hello, pipeline_name="hello-for-runs")
version = client.list_pipeline_versions(pipeline.pipeline_id).pipeline_versions[0]
third = client.run_pipeline(experiment.experiment_id, "third from version", pipeline_id=pipeline.pipeline_id,
                            version_id=version.pipeline_version_id, params={"name": "c"})
got = client.get_run(first.run_id)
out["first"] = {"display_name": got.display_name, "experiment": got.experiment_id == experiment.experiment_id,
                "parameters": got.runtime_config.parameters, "state": got.state,
                "storage_state": got.storage_state, "spec": got.pipeline_spec["pipelineInfo"]["name"]}
out["third"] = [client.get_run(third.run_id).pipeline_version_reference.pipeline_version_id
                == version.pipeline_version_id]
default = client.get_experiment(experiment_name="Default")
out["second_in_default"] = client.get_run(second).experiment_id == default.experiment_id


def names(**kwargs):
    return [r.display_name for r in client.list_runs(**kwargs).runs or []]


def where(*predicates):
    return json.dumps({"predicates": list(predicates)})


out["newest_first"] = [[r.display_name, r.created_at.isoformat()] for r in
                       client.list_runs(sort_by="created_at desc").runs]
out["oldest_first"] = [r.created_at.isoformat() for r in client.list_runs(sort_by="created_at").runs]
out["equals"] = names(filter=where({"operation": "EQUALS", "key": "display_name", "stringValue": "first"}))
out["substring"] = names(filter=where({"operation": "IS_SUBSTRING", "key": "display_name", "stringValue": "ir"}),
                         sort_by="display_name")
out["in"] = names(filter=where({"operation": "IN", "key": "display_name",
                                "stringValues": {"values": ["first", "second"]}}), sort_by="display_name desc")
out["in_experiment"] = names(experiment_id=experiment.experiment_id, sort_by="display_name")
page = client.list_runs(page_size=2, sort_by="display_name")
rest = client.list_runs(page_size=2, sort_by="display_name", page_token=page.next_page_token)
out["pages"] = [[r.display_name for r in page.runs], [r.display_name for r in rest.runs], page.total_size,
                rest.next_page_token]
client.archive_run(first.run_id)
out["archived"] = client.get_run(first.run_id).storage_state
out["available"] = names(filter=where({"operation": "EQUALS", "key": "storage_state",
                                       "stringValue": "AVAILABLE"}), sort_by="display_name")
client.unarchive_run(first.run_id)
out["unarchived"] = client.get_run(first.run_id).storage_state
client.terminate_run(second)
out["retry_unfinished"] = refused(client.runs.run_service_retry_run, run_id=first.run_id)["status"]
client.delete_run(third.run_id)
out["deleted"] = refused(client.get_run, third.run_id)["status"]
out["names"] = {"first": first.run_id, "second": second}
client.archive_experiment(experiment.experiment_id)  # archives its runs too, as KFP does
out["experiment_archived"] = [client.get_experiment(experiment_id=experiment.experiment_id).storage_state,
                              client.get_run(first.run_id).storage_state, client.get_run(second).storage_state]
client.unarchive_experiment(experiment.experiment_id)
out["experiment_unarchived"] = client.get_experiment(experiment_id=experiment.experiment_id).storage_state
'''


def test_runs_through_kfp_client(plane: ControlPlaneHandle, seen: dict) -> None:
    out = seen["runs"]
    assert out["same_experiment"]
    assert out["first"] == {"display_name": "first", "experiment": True, "parameters": {"name": "a"},
                            "state": out["first"]["state"], "storage_state": "AVAILABLE", "spec": "hello"}
    assert out["third"] == [True]
    assert out["second_in_default"]
    # Creation times have seconds (as KFP's): runs made in the same second may come in either order.
    newest = [created for _, created in out["newest_first"]]
    assert sorted(name for name, _ in out["newest_first"]) == ["first", "second", "third from version"]
    assert newest == sorted(newest, reverse=True) and out["oldest_first"] == sorted(newest)
    assert out["equals"] == ["first"]
    assert out["substring"] == ["first", "third from version"]
    assert out["in"] == ["second", "first"]
    assert out["in_experiment"] == ["first", "third from version"]
    assert out["pages"] == [["first", "second"], ["third from version"], 3, None]
    assert out["archived"] == "ARCHIVED"
    assert out["available"] == ["second", "third from version"]
    assert out["unarchived"] == "AVAILABLE"
    assert out["experiment_archived"] == ["ARCHIVED", "ARCHIVED", "AVAILABLE"]  # second is in Default
    assert out["experiment_unarchived"] == "AVAILABLE"
    assert out["deleted"] == 404
    # The runs are the store's Run objects: what kubectl and the controllers see.
    api = plane.client()
    try:
        runs = {r["metadata"]["uid"]: r for r in api.list("Run", "default")}
    finally:
        api.close()
    first = runs[out["names"]["first"]]
    assert first["spec"]["experiment"] == "nightly" and first["spec"]["parameters"] == {"name": "a"}
    assert runs[out["names"]["second"]]["spec"]["terminate"] is True
    assert runs[out["names"]["second"]]["spec"]["experiment"] == "default"


BAD = r'''
out = {"not_pipeline": refused(client.upload_pipeline, not_pipeline, pipeline_name="not-a-pipeline"),
       "future": refused(client.upload_pipeline, future, pipeline_name="future"),
       "wrong_type": refused(client.create_run_from_pipeline_package, hello, arguments={"name": 3}),
       "unknown_param": refused(client.create_run_from_pipeline_package, hello, arguments={"colour": "red"}),
       "pipelines": [p.display_name for p in client.list_pipelines().pipelines or []]}


def raw(method, path, body=None):
    """A request kfp.Client would never send, straight at the REST API."""
    import ssl, urllib.error, urllib.request
    request = urllib.request.Request(cluster["server"] + path, data=body, method=method,
                                     headers={"Authorization": f"Bearer {user['token']}"})
    try:
        with urllib.request.urlopen(request, context=ssl.create_default_context(cafile="ca.crt")) as response:
            return [response.status, json.load(response)]
    except urllib.error.HTTPError as exc:
        return [exc.code, json.load(exc)]


out["not_json"] = raw("POST", "/apis/v2beta1/runs", b"{not json")
out["no_such_path"] = raw("GET", "/apis/v2beta1/nothing/here")
out["bad_filter"] = raw("GET", "/apis/v2beta1/runs?filter=" + urllib.parse.quote(json.dumps(
    {"predicates": [{"key": "display_name", "operation": "RESEMBLES", "stringValue": "x"}]})))
'''


def test_bad_uploads_and_runs_are_refused_with_the_path(seen: dict) -> None:
    out = seen["bad"]
    for case, words in (("not_pipeline", ["spec.pipelineSpec", "not a compiled pipeline"]),
                        ("future", ["spec.pipelineSpec.schemaVersion", "9.0.0"]),
                        ("wrong_type", ["spec.parameters.name", "must be STRING"]),
                        ("unknown_param", ["spec.parameters.colour", "no such input"])):
        refusal = out[case]
        assert refusal["status"] == 400, (case, refusal)
        assert refusal["body"]["code"] == 3
        assert all(w in refusal["body"]["message"] for w in words), (case, refusal)
    assert "not-a-pipeline" not in out["pipelines"] and "future" not in out["pipelines"]  # nothing half-made
    assert out["not_json"][0] == 400 and out["not_json"][1]["code"] == 3
    assert out["no_such_path"][0] == 404 and out["no_such_path"][1]["code"] == 5
    assert out["bad_filter"][0] == 400 and "filter.predicates[0].operation" in out["bad_filter"][1]["message"]


TOKENS = r'''
viewer = kfp.Client(host=cluster["server"], existing_token=os.environ["VIEW_TOKEN"], ssl_ca_cert="ca.crt")
out = {"list": viewer.list_runs(namespace="team-a").total_size or 0,
       "create": refused(viewer.create_experiment, "mine", namespace="team-a")["status"],
       "elsewhere": refused(viewer.list_runs, namespace="default")["status"]}
'''


def test_a_view_token_reads_its_namespace_only(seen: dict) -> None:
    assert seen["tokens"] == {"list": 0, "create": 403, "elsewhere": 403}


@pytest.fixture(scope="module")
def seen(plane: ControlPlaneHandle, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What every section saw, from one kfp.Client script."""
    tmp_path = tmp_path_factory.mktemp("kfp-client-script")
    hello = compiled("hello")
    not_pipeline = tmp_path / "not-a-pipeline.yaml"
    not_pipeline.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    future = tmp_path / "future.yaml"
    future.write_text(hello.path.read_text().replace("schemaVersion: 2.1.0", "schemaVersion: 9.0.0"))
    created = plane.cli("token", "create", "--namespace", "team-a", "--role", "view")
    token = next(w for w in created.stdout.split() if w.startswith("tmr"))
    sections = {"pipelines": PIPELINES, "runs": RUNS, "bad": BAD, "tokens": TOKENS}
    script = CONNECT + "hello, not_pipeline, future = sys.argv[1:4]\nseen = {}\n" + "".join(
        f"{body}\nseen[{name!r}] = out\n" for name, body in sections.items()) + "print(json.dumps(seen))\n"
    return run_client(kfp_python(), plane, script, tmp_path, str(hello.path), str(not_pipeline), str(future),
                      env={"VIEW_TOKEN": token})
