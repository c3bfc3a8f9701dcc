"""Strategic merge patch as kube-apiserver merges it, by each field's type (upstream's patch
strategies and merge keys), through the real kubectl (``patch --type=strategic``, and client-side
``apply``, which sends a strategic patch computed from the last-applied annotation) and the real
``kubernetes`` Python client (whose ``patch_*`` methods send strategic patches for built-in kinds)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.server.sdk import run_client
from tests.server.test_kubectl import KUBECTL, in_namespace, kubectl  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is installed by .ci/run (Debian's kubernetes-client)")

plane = shared_plane("strategic")

SERVICE = """
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: metrics, port: 9090}
"""


def _deployment(volume: str, strategy: str, tolerations: str,
                env: str = '[{name: A, value: "1"}, {name: B, value: "2"}]') -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: app}}
spec:
  replicas: 0
  selector: {{matchLabels: {{app: app}}}}
  strategy: {strategy}
  template:
    metadata: {{labels: {{app: app}}}}
    spec:
      tolerations: {tolerations}
      containers:
      - name: main
        image: python
        env: {env}
        ports: [{{containerPort: 8080}}]
        volumeMounts: [{{name: data, mountPath: /data}}]
      volumes:
      - {volume}
"""


def _get(run, *what: str) -> dict:  # noqa: ANN001
    return json.loads(run("get", *what, "-o", "json").stdout)


def test_kubectl_patch_merges_a_services_ports_by_port(kubectl) -> None:  # noqa: ANN001, F811
    run = in_namespace(kubectl, "smp-service")
    run("apply", "-f", "-", input=SERVICE)
    run("patch", "service", "web", "--type=strategic", "-p",
        json.dumps({"spec": {"ports": [{"port": 80, "targetPort": 8081}]}}))
    ports = _get(run, "service", "web")["spec"]["ports"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in ports] == [("http", 80, 8081), ("metrics", 9090, 9090)]
    # A new port, named by a port not there yet, joins the list (before the others, as upstream orders it).
    run("patch", "service", "web", "--type=strategic", "-p",
        json.dumps({"spec": {"ports": [{"name": "grpc", "port": 9000}]}}))
    assert [p["port"] for p in _get(run, "service", "web")["spec"]["ports"]] == [9000, 80, 9090]


def test_kubectl_apply_switches_a_volume_source_and_a_strategy_with_retain_keys(kubectl) -> None:  # noqa: ANN001, F811
    run = in_namespace(kubectl, "smp-apply")
    run("apply", "-f", "-", input=_deployment("{name: data, emptyDir: {}}",
                                              "{type: RollingUpdate, rollingUpdate: {maxSurge: 2}}",
                                              "[{key: a, operator: Exists}]"))
    run("apply", "-f", "-", input=_deployment("{name: data, configMap: {name: settings}}", "{type: Recreate}",
                                              "[{key: b, operator: Exists}]"))
    spec = _get(run, "deployment", "app")["spec"]
    # $retainKeys drops the old source and the old strategy's parameters: both kept would be invalid.
    (volume,) = spec["template"]["spec"]["volumes"]
    assert sorted(volume) == ["configMap", "name"] and volume["configMap"]["name"] == "settings"
    assert spec["strategy"] == {"type": "Recreate"}
    assert spec["template"]["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]
    # An env var dropped from the manifest and one added before the rest: kubectl sends a $patch:
    # delete item and $setElementOrder, and the list ends in the manifest's order.
    run("apply", "-f", "-", input=_deployment("{name: data, configMap: {name: settings}}", "{type: Recreate}",
                                              "[{key: b, operator: Exists}]",
                                              env='[{name: C, value: "3"}, {name: A, value: "1"}]'))
    env = _get(run, "deployment", "app")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "C", "value": "3"}, {"name": "A", "value": "1"}]


def test_kubectl_patch_replaces_tolerations_and_merges_containers_env_by_name(kubectl) -> None:  # noqa: ANN001, F811
    run = in_namespace(kubectl, "smp-patch")
    run("apply", "-f", "-", input=_deployment("{name: data, emptyDir: {}}", "{type: Recreate}",
                                              "[{key: a, operator: Exists}, {key: c, operator: Exists}]"))
    run("patch", "deployment", "app", "-p", json.dumps({"spec": {"template": {"spec": {
        "tolerations": [{"key": "b", "operator": "Exists"}],
        "containers": [{"name": "main", "env": [{"name": "B", "value": "3"}]}]}}}}))
    pod = _get(run, "deployment", "app")["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{"key": "b", "operator": "Exists"}]  # no merge key: atomic
    assert pod["containers"][0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]
    assert pod["containers"][0]["image"] == "python"
    # A primitive list of the merge strategy: finalizers merge as a set, and leave by the directive.
    run("patch", "deployment", "app", "-p", json.dumps({"metadata": {"finalizers": ["example.com/a"]}}))
    run("patch", "deployment", "app", "-p", json.dumps({"metadata": {"finalizers": ["example.com/b"]}}))
    assert _get(run, "deployment", "app")["metadata"]["finalizers"] == ["example.com/b", "example.com/a"]
    run("patch", "deployment", "app", "-p",
        json.dumps({"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a", "example.com/b"]}}))
    assert not _get(run, "deployment", "app")["metadata"].get("finalizers")
    # $retainKeys by hand: the volume keeps only the keys it lists.
    run("patch", "deployment", "app", "-p", json.dumps({"spec": {"template": {"spec": {"volumes": [
        {"name": "data", "$retainKeys": ["name", "secret"], "secret": {"secretName": "s"}}]}}}}))
    (volume,) = _get(run, "deployment", "app")["spec"]["template"]["spec"]["volumes"]
    assert sorted(volume) == ["name", "secret"]


def test_openapi_publishes_the_patch_strategies_kubectl_computes_its_patches_from(kubectl) -> None:  # noqa: ANN001, F811
    doc = json.loads(kubectl("get", "--raw", "/openapi/v3/apis/apps/v1").stdout)
    schemas = doc["components"]["schemas"]
    pod_spec = next(s for name, s in schemas.items() if name.endswith(".PodSpec"))["properties"]
    assert pod_spec["volumes"]["x-kubernetes-patch-strategy"] == "merge,retainKeys"
    assert pod_spec["volumes"]["x-kubernetes-patch-merge-key"] == "name"
    assert "x-kubernetes-patch-strategy" not in pod_spec["tolerations"]
    deployment_spec = next(s for name, s in schemas.items() if name.endswith(".DeploymentSpec"))["properties"]
    assert deployment_spec["strategy"]["x-kubernetes-patch-strategy"] == "retainKeys"


def test_a_bad_directive_is_refused_with_upstreams_words(kubectl) -> None:  # noqa: ANN001, F811
    run = in_namespace(kubectl, "smp-bad")
    run("apply", "-f", "-", input=SERVICE)
    proc = run("patch", "service", "web", "-p", json.dumps({"spec": {"ports": [{"targetPort": 1}]}}), check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == \
        "Error from server: map: map[targetPort:1] does not contain declared merge key: port"


PYTHON_CLIENT = r'''
import json
from kubernetes import client, config

config.load_kube_config()
core, apps = client.CoreV1Api(), client.AppsV1Api()
NS = "smp-python"
core.create_namespace({"metadata": {"name": NS}})
core.create_namespaced_service(NS, {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [
    {"name": "http", "port": 80, "targetPort": 8080}, {"name": "metrics", "port": 9090}]}})
service = core.patch_namespaced_service("web", NS, {"spec": {"ports": [{"port": 9090, "name": "prom"}]}})
apps.create_namespaced_deployment(NS, {"metadata": {"name": "app"}, "spec": {
    "replicas": 0, "selector": {"matchLabels": {"app": "app"}},
    "template": {"metadata": {"labels": {"app": "app"}}, "spec": {"containers": [{
        "name": "main", "image": "python", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}}}})
deployment = apps.patch_namespaced_deployment("app", NS, {"spec": {"template": {"spec": {"containers": [
    {"name": "main", "env": [{"name": "A", "$patch": "delete"}]}]}}}})
replaced = apps.patch_namespaced_deployment("app", NS, {"spec": {"template": {"spec": {"containers": [
    {"name": "main", "env": [{"$patch": "replace"}, {"name": "Z", "value": "9"}]}]}}}})
print(json.dumps({
    "ports": [[p.name, p.port] for p in service.spec.ports],
    "env": [[e.name, e.value] for e in deployment.spec.template.spec.containers[0].env],
    "replaced": [[e.name, e.value] for e in replaced.spec.template.spec.containers[0].env],
}))
'''


def test_the_python_clients_patches_merge_by_type(plane: ControlPlaneHandle, tmp_path: Path) -> None:
    out = run_client(sys.executable, plane, PYTHON_CLIENT, tmp_path)
    assert out["ports"] == [["http", 80], ["prom", 9090]]
    assert out["env"] == [["B", "2"]]
    assert out["replaced"] == [["Z", "9"]]
