"""kubectl's workload generators (the real kubectl): `create deployment|job|service`, `expose` and
`run`, which send typed objects in protobuf, and how a protobuf body outside what is decoded is met."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import poll
from trimaran.server.kube.protobuf import _CLASSES, ProtobufError, decode

KUBECTL = shutil.which("kubectl")


plane = shared_plane("kubectl-workloads")


@pytest.fixture
def kubectl(plane: ControlPlaneHandle, tmp_path):  # noqa: ANN001, ANN201
    if KUBECTL is None:
        pytest.skip("kubectl is installed by .ci/run (Debian's kubernetes-client)")
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kcache"),
               HOME=str(tmp_path))

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run


def _get(kubectl, *args: str) -> dict:  # noqa: ANN001
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def test_create_deployment_expose_and_service(plane: ControlPlaneHandle, kubectl) -> None:  # noqa: ANN001
    assert kubectl("create", "deployment", "web", "--image=python", "--port=8000", "--",
                   "python3", "-m", "http.server", "8000").stdout.strip() == "deployment.apps/web created"
    template = _get(kubectl, "deployment", "web")["spec"]["template"]
    assert template["metadata"]["labels"] == {"app": "web"}
    container = template["spec"]["containers"][0]
    assert container["command"] == ["python3", "-m", "http.server", "8000"]
    assert container["ports"] == [{"containerPort": 8000, "protocol": "TCP"}]
    kubectl("rollout", "status", "deployment/web", "--timeout=120s")

    assert kubectl("expose", "deployment", "web", "--port=80", "--target-port=8000").stdout.strip() == \
        "service/web exposed"
    spec = _get(kubectl, "service", "web")["spec"]
    assert spec["selector"] == {"app": "web"}
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 8000}]
    poll(lambda: [p["port"] for s in _get(kubectl, "endpoints", "web").get("subsets") or [] for p in s["ports"]]
         == [8000], timeout=60, what="the Service's endpoint on the Deployment's pod")

    # Several kinds in one get, as kubectl lists them: each its own table, names as kind.group/name.
    assert plane.cli("get", "deploy,svc", "-o", "name").stdout == kubectl("get", "deploy,svc", "-o", "name").stdout
    tables = plane.cli("get", "deployments,services").stdout.split("\n\n")
    assert [t.split()[0:2] for t in tables] == [["NAME", "READY"], ["NAME", "TYPE"]]
    assert "deployment.apps/web " in tables[0] and "service/web " in tables[1]
    # The port name `create service` writes is a DNS label, not a container port's IANA name.
    kubectl("create", "service", "clusterip", "api", "--tcp=81:8000")
    assert _get(kubectl, "service", "api")["spec"]["ports"][0]["name"] == "81-8000"
    assert kubectl("scale", "deployment", "web", "--replicas=0").returncode == 0
    assert _get(kubectl, "deployment", "web")["spec"]["replicas"] == 0  # a zero that is a value


def test_create_job_and_run_a_pod(kubectl) -> None:  # noqa: ANN001
    kubectl("create", "job", "hello", "--image=python", "--", "python3", "-c", "print('hello from a job')")
    kubectl("wait", "--for=condition=Complete", "job/hello", "--timeout=120s")
    assert "hello from a job" in kubectl("logs", "job/hello").stdout
    assert _get(kubectl, "job", "hello")["spec"]["template"]["spec"]["restartPolicy"] == "Never"

    kubectl("run", "once", "--image=python", "--restart=Never", "--command", "--",
            "python3", "-c", "print('hello from run')")
    poll(lambda: _get(kubectl, "pod", "once")["status"].get("phase") == "Succeeded", timeout=120,
         what="the pod of kubectl run to succeed")
    assert kubectl("logs", "once").stdout.strip() == "hello from run"


def _deployment_body(spec_tail: bytes) -> bytes:
    """A Deployment in protobuf as kubectl frames it, with ``spec_tail`` appended to its spec's bytes."""
    deployment = _CLASSES["Deployment"]()
    deployment.metadata.name = "raw"
    deployment.spec.replicas = 1
    spec = deployment.spec.SerializeToString() + spec_tail
    # Framed by hand: metadata (field 1) as serialised, spec (field 2) with the tail.
    metadata = deployment.metadata.SerializeToString()
    raw = b"\x0a" + bytes([len(metadata)]) + metadata + b"\x12" + bytes([len(spec)]) + spec
    envelope = _CLASSES["Unknown"]()
    envelope.typeMeta.apiVersion, envelope.typeMeta.kind = "apps/v1", "Deployment"
    envelope.raw = raw
    return b"k8s\x00" + envelope.SerializeToString()


def test_a_protobuf_field_outside_the_decoded_subset_is_refused_not_dropped() -> None:
    # DeploymentSpec.strategy (field 4) is not decoded: a strategy with a type would be lost.
    recreate = b"Recreate"
    strategy = b"\x0a" + bytes([len(recreate)]) + recreate
    with pytest.raises(ProtobufError, match=r"Deployment\.spec \(field 4\) is not read from protobuf"):
        decode(_deployment_body(b"\x22" + bytes([len(strategy)]) + strategy))
    # Go writes an empty strategy struct whatever the client set: it carries nothing and passes.
    empty_strategy = b"\x0a\x00"
    decoded = decode(_deployment_body(b"\x22" + bytes([len(empty_strategy)]) + empty_strategy))
    assert decoded == {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "raw"},
                       "spec": {"replicas": 1}}
