"""apiregistration.k8s.io/v1 APIServices against a real control plane, with the real kubectl and the
``kubernetes`` Python client: one Local APIService per group version discovery lists, with upstream's
priorities, Available; kept (a deleted one comes back); one a user registers for a Service is stored
and said not to be available, as kube-aggregator says it; upstream's words for bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from tests.server.sdk import run_client
from trimaran.api import ManifestError, validate
from trimaran.cli.client import Client

plane = shared_plane("apiservice")
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")

WARDLE = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
          "metadata": {"name": "v1alpha1.wardle.k8s.io"},
          "spec": {"insecureSkipTLSVerify": True, "group": "wardle.k8s.io", "groupPriorityMinimum": 1000,
                   "versionPriority": 15, "service": {"name": "api", "namespace": "wardle"}, "version": "v1alpha1"}}

CLIENT = r'''
import json
from kubernetes import client, config
from kubernetes.client.rest import ApiException

config.load_kube_config()
api = client.ApiregistrationV1Api()
listed = api.list_api_service()
apps = api.read_api_service("v1.apps")
created = api.create_api_service(WARDLE)
try:
    api.create_api_service(WARDLE)
    conflict = None
except ApiException as exc:
    conflict = json.loads(exc.body)
api.delete_api_service("v1alpha1.wardle.k8s.io", body={})
print(json.dumps({
    "names": [a.metadata.name for a in listed.items],
    "core": [(a.spec.service, a.status.conditions[0].reason) for a in listed.items if a.metadata.name == "v1."],
    "apps": [apps.spec.group, apps.spec.version, apps.spec.group_priority_minimum, apps.spec.version_priority],
    "created": [created.spec.group, created.spec.service.name, created.spec.service.port],
    "conflict": conflict}))
'''


def kubectl(plane: ControlPlaneHandle, tmp_path: Path, *args: str, stdin: str | None = None) -> str:
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kc"),
               HOME=str(tmp_path))
    done = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=90, input=stdin)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_validation_has_upstreams_words() -> None:
    bad = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v2.wardle"},
           "spec": {"group": "", "version": "v2", "caBundle": "AAAA", "groupPriorityMinimum": 30000}}
    with pytest.raises(ManifestError) as caught:
        validate(bad)
    text = str(caught.value)
    for line in ('metadata.name: Invalid value: "v2.wardle": must be `spec.version+"."+spec.group`: "v2."',
                 "spec.group: Required value: only v1 may have an empty group and it better be legacy kube",
                 "spec.groupPriorityMinimum: Invalid value: 30000: must be positive and less than 20000",
                 "spec.versionPriority: Invalid value: 0: must be positive and less than 1000",
                 'spec.caBundle: Invalid value: "3 bytes": local APIServices may not have a caBundle'):
        assert line in text, text


@needs_kubectl
def test_every_served_group_version_is_a_local_apiservice(plane: ControlPlaneHandle, api: Client,
                                                          tmp_path: Path) -> None:
    discovered = json.loads(kubectl(plane, tmp_path, "get", "--raw", "/apis"))
    wanted = {"v1."} | {f"{v['version']}.{g['name']}" for g in discovered["groups"] for v in g["versions"]}
    assert {"v1.apiregistration.k8s.io", "v1.networking.k8s.io", "v1.kubeflow.org"} <= wanted

    def listed() -> set[str] | None:
        names = {a["metadata"]["name"] for a in api.list("APIService")}
        return names if names >= wanted else None
    assert poll(listed, timeout=30, what="an APIService per group version") == wanted

    rows = [line.split() for line in kubectl(plane, tmp_path, "get", "apiservices").splitlines()]
    assert rows[0] == ["NAME", "SERVICE", "AVAILABLE", "AGE"]
    by_name = {row[0]: row[1:3] for row in rows[1:]}
    assert by_name["v1."] == ["Local", "True"] and by_name["v1.apps"] == ["Local", "True"]
    apps = api.get("APIService", "", "v1.apps")
    assert (apps["spec"]["groupPriorityMinimum"], apps["spec"]["versionPriority"]) == (17800, 15)
    assert "service" not in apps["spec"]
    condition, = apps["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Available", "True", "Local")
    crd_group = api.get("APIService", "", "v1.kubeflow.org")["spec"]
    assert (crd_group["groupPriorityMinimum"], crd_group["versionPriority"]) == (1000, 100)

    # One the user deletes is put back, as kube-aggregator's autoregister controller does.
    kubectl(plane, tmp_path, "delete", "apiservice", "v1.batch")
    poll(lambda: "v1.batch" in {a["metadata"]["name"] for a in api.list("APIService")}, timeout=30,
         what="v1.batch back")

    # One a user registers for a Service: stored, and not available (nothing is proxied).
    kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(WARDLE))
    row = poll(lambda: next((r for r in [line.split() for line in kubectl(
        plane, tmp_path, "get", "apiservice", "v1alpha1.wardle.k8s.io", "--no-headers").splitlines()]
        if r[2] != "Unknown"), None), timeout=30, what="the Available condition")
    assert row[1:4] == ["wardle/api", "False", "(ServiceNotFound)"]
    kubectl(plane, tmp_path, "delete", "apiservice", "v1alpha1.wardle.k8s.io")


def test_the_python_clients_apiregistration_api(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    result = run_client(sys.executable, plane, f"WARDLE = {WARDLE!r}\n" + CLIENT, tmp_path, timeout=120)
    assert "v1.apps" in result["names"] and "v1.apiregistration.k8s.io" in result["names"]
    assert result["core"] == [[None, "Local"]]
    assert result["apps"] == ["apps", "v1", 17800, 15]
    assert result["created"] == ["wardle.k8s.io", "api", 443]
    assert result["conflict"]["reason"] == "AlreadyExists"
    assert result["conflict"]["message"] == 'apiservices.apiregistration.k8s.io "v1alpha1.wardle.k8s.io" already exists'
