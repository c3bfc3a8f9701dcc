"""Pod specs a node can never run are refused at apply, each with its field path: a NUL byte
(execve cannot pass one), a relative mount path, a claim or host path that climbs out with '..'."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.builders import batch_job, container, pod, pytorchjob, replica
from trimaran.api import ManifestError, validate
from trimaran.api.meta import pod_hostname


def problems(manifest: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate(manifest)
    return [str(e) for e in info.value.field_errors]


@pytest.mark.parametrize(("field", "value", "path"), [
    ("command", ["python", "-c", "print(1)\x00"], "spec.containers[0].command[2]"),
    ("args", ["ok", "\x00"], "spec.containers[0].args[1]"),
    ("workingDir", "/tmp\x00x", "spec.containers[0].workingDir"),
    ("env", [{"name": "A", "value": "x\x00y"}], "spec.containers[0].env[0].value"),
])
def test_nul_bytes_are_refused(field: str, value: Any, path: str) -> None:
    found = problems(pod({"containers": [container("c", **{field: value})]}))
    assert [p for p in found if p.startswith(path + ": Invalid value: ") and p.endswith("must not contain a NUL byte")
            ], found


def test_nul_in_a_workload_template_names_the_template_path() -> None:
    job = pytorchjob({"Master": replica([container("pytorch", command=["a\x00"])])})
    found = problems(job)
    assert any(p.startswith("spec.pytorchReplicaSpecs.Master.template.spec.containers[0].command[0]")
               for p in found), found


@pytest.mark.parametrize(("volumes", "mounts", "expected"), [
    ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "data"}],
     'spec.template.spec.containers[0].volumeMounts[0].mountPath: Invalid value: "data": must be an absolute path'),
    ([{"name": "v", "persistentVolumeClaim": {"claimName": "../../.."}}], [],
     'spec.template.spec.volumes[0].persistentVolumeClaim.claimName: Invalid value: "../../..": a lowercase RFC 1123 '
     'subdomain'),
    ([{"name": "v", "hostPath": {"path": "/srv/../etc"}}], [],
     "spec.template.spec.volumes[0].hostPath.path: Invalid value: \"/srv/../etc\": must not contain '..'"),
    ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "/x", "subPath": "a/../../b"}],
     "spec.template.spec.containers[0].volumeMounts[0].subPath: Invalid value: \"a/../../b\": must not contain '..'"),
    ([{"name": "v", "emptyDir": {}}], [{"name": "v", "mountPath": "/x", "subPathExpr": "/$(POD)"}],
     'spec.template.spec.containers[0].volumeMounts[0].subPathExpr: Invalid value: "/$(POD)": must be a relative path'),
])
def test_mounts_and_claims_that_leave_their_place(volumes: list[Any], mounts: list[Any], expected: str) -> None:
    found = problems(batch_job({"restartPolicy": "Never", "containers": [container("c", volumeMounts=mounts)],
                                "volumes": volumes}))
    assert any(p.startswith(expected) for p in found), found


def test_valid_mounts_still_pass() -> None:
    validate(batch_job({"restartPolicy": "Never", "containers": [container("c", volumeMounts=[
        {"name": "v", "mountPath": "/data", "subPath": "runs/a"}])],
        "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "digits-models"}}]}))


@pytest.mark.parametrize(("name", "hostname"), [
    ("a" * 62 + "-master-0", "a" * 62),  # the cut at 63 leaves a '-': dropped, as the kubelet does
    ("a" * 61 + ".-x", "a" * 61),
    ("short-0", "short-0"),
    ("b" * 63, "b" * 63),
])
def test_pod_hostnames_are_trimmed_as_the_kubelet_trims_them(name: str, hostname: str) -> None:
    assert pod_hostname(name) == hostname


_BIG = "x" * 1_000_000
_ENV_TOO_LONG = ": Too long: may not be more than 131071 bytes: with its name (NAME=VALUE)"
_ROOT_MOUNT = ': Invalid value: "/": must not be "/"'


def _isvc(env: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "s"},
            "spec": {"predictor": {"sklearn": {"storageUri": "pvc://models/m", "env": env}}}}


@pytest.mark.parametrize(("manifest", "path"), [
    (pod({"containers": [container("c", env=[{"name": "BIG", "value": _BIG}])]}), "spec.containers[0].env[0].value"),
    (pod({"containers": [container("c")], "initContainers": [container("i", env=[{"name": "B", "value": _BIG}])]}),
     "spec.initContainers[0].env[0].value"),
    (batch_job({"restartPolicy": "Never", "containers": [container("c", env=[{"name": "BIG", "value": _BIG}])]}),
     "spec.template.spec.containers[0].env[0].value"),
    (pytorchjob({"Master": replica([container("pytorch", env=[{"name": "BIG", "value": _BIG}])])}),
     "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].env[0].value"),
    (_isvc([{"name": "BIG", "value": _BIG}]), "spec.predictor.sklearn.env[0].value"),
])
def test_an_environment_string_longer_than_execve_takes_is_refused(manifest: dict[str, Any], path: str) -> None:
    found = problems(manifest)
    assert [p for p in found if p.startswith(path + _ENV_TOO_LONG)], found
    assert all(_BIG not in p for p in found), "the value is not printed back"


def test_an_environment_string_execve_takes_is_accepted() -> None:
    value = "x" * (131071 - len("OK="))
    validate(pod({"containers": [container("c", env=[{"name": "OK", "value": value}])]}))
    with pytest.raises(ManifestError):
        validate(pod({"containers": [container("c", env=[{"name": "OK", "value": value + "x"}])]}))


def test_an_argument_longer_than_execve_takes_is_refused() -> None:
    found = problems(pod({"containers": [container("c", command=["python", "-c", _BIG])]}))
    assert [p for p in found if p.startswith("spec.containers[0].command[2]: Too long: may not be more than "
                                             "131071 bytes")], found


@pytest.mark.parametrize("mount_path", ["/", "//", "/.", "/tmp/.."])
@pytest.mark.parametrize(("wrap", "prefix"), [
    (lambda spec: pod(spec), "spec"),
    (lambda spec: batch_job({**spec, "restartPolicy": "Never"}), "spec.template.spec"),
    (lambda spec: pytorchjob({"Worker": {"template": {"spec": spec}}}),
     "spec.pytorchReplicaSpecs.Worker.template.spec"),
])
def test_a_volume_mounted_at_the_root_is_refused(mount_path: str, wrap: Any, prefix: str) -> None:
    spec = {"containers": [container("pytorch", volumeMounts=[{"name": "scratch", "mountPath": mount_path}])],
            "volumes": [{"name": "scratch", "emptyDir": {}}]}
    found = problems(wrap(spec))
    assert [p for p in found if p.startswith(f"{prefix}.containers[0].volumeMounts[0].mountPath: Invalid value: "
                                             f"{mount_path!r}".replace("'", '"'))
            and 'must not be "/"' in p], found
