"""Public images by their public names through a registry mirror, in a real control plane: the
stand-ins for seed 001's ``tensorflow/serving`` and seed 000's ``seldonio/mock_classifier_rest:1.3``
serve their APIs, and ``busybox`` / ``python:3.11-slim`` run, all pulled from a loopback registry
named in ``$TRIMARAN_HOME/certs.d`` while the upstream registries are unreachable."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.conftest import shared_plane
from tests.helpers import pod_network_on, poll
from tests.imagekit import free_port, registry, test_images  # noqa: F401 (fixtures)
from tests.standins import public_mirror, seed_001_manifests, write_mirror_config  # noqa: F401 (fixtures)
from trimaran.runtime.images import parse_reference

plane = shared_plane("standins")


@pytest.fixture(scope="module")
def mirrored(plane, public_mirror) -> Iterator[None]:  # noqa: F811 (fixtures)
    """The plane's certs.d names the mirror; each upstream is a loopback address nobody listens on."""
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    write_mirror_config(plane.home / "certs.d", public_mirror.host, upstream=f"http://127.0.0.1:{dead.getsockname()[1]}")
    yield
    dead.close()


def apply(plane, obj: dict) -> None:
    plane.cli("apply", "-f", "-", input=json.dumps(obj))


def pod(name: str, image: str, **container: object) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": image, **container}]}}


def finished(plane, name: str) -> dict:
    return poll(lambda: (p := plane.get("pod", name))["status"].get("phase") in ("Succeeded", "Failed") and p,
                timeout=120, interval=0.1, what=f"{name} to finish")


def running_ip(plane, name: str) -> str:
    found = poll(lambda: (p := plane.get("pod", name))["status"].get("phase") in ("Running", "Failed") and p,
                 timeout=120, interval=0.1, what=f"{name} to run")
    assert found["status"]["phase"] == "Running", found["status"]
    return found["status"]["podIP"]


def http(method: str, url: str, body: dict | None = None) -> tuple[int, dict | str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as error:
        text, status = error.read().decode(), error.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def answering(method: str, url: str, body: dict | None = None) -> tuple[int, dict | str]:
    """The first answer of a server that is still starting (connection refused until it listens)."""
    def once() -> tuple[int, dict | str] | None:
        try:
            return http(method, url, body)
        except OSError:
            return None
    return poll(once, timeout=60, interval=0.1, what=f"{url} to answer")


@pytest.mark.parametrize(("image", "args", "expected"), [
    ("busybox", ["sh", "-c", "echo from busybox"], "from busybox"),
    ("python:3.11-slim", ["python", "-c", "import sys; print(sys.version_info[:2])"], "(3, 11)"),
])
def test_public_names_run_from_the_mirror(plane, mirrored, image: str, args: list[str], expected: str) -> None:
    name = image.split(":")[0] + "-run"
    apply(plane, pod(name, image, args=args))
    done = finished(plane, name)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert plane.cli("logs", name).stdout.strip() == expected
    status = done["status"]["containerStatuses"][0]
    # As the kubelet reports it: the normalised name, and the digest the mirror gave under it.
    repository = "docker.io/library/" + image.split(":")[0]
    assert status["image"] == str(parse_reference(image)) and status["imageID"].startswith(repository + "@sha256:")
    plane.cli("delete", "pod", name)


def test_the_tensorflow_serving_standin_serves_tf_servings_rest_api(plane, mirrored) -> None:
    # Beside other pods on the host's network the REST port is one of our own (the real image takes
    # the same flag); with a pod network of its own it keeps 8501.
    port = free_port()
    apply(plane, pod("tf-serving", "tensorflow/serving", args=[f"--rest_api_port={port}"],
                     env=[{"name": "MODEL_NAME", "value": "half_plus_two"}]))
    base = f"http://{running_ip(plane, 'tf-serving')}:{port}/v1/models/half_plus_two"
    status, body = answering("GET", base)
    assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE", body
    assert http("POST", base + ":predict", {"instances": [1.0, 2.0, 5.0]}) == (200, {"predictions": [2.5, 3.0, 4.5]})
    assert http("POST", base + "/versions/1:predict", {"inputs": [[4.0]]}) == (200, {"outputs": [[4.0]]})
    missing = http("POST", base.replace("half_plus_two", "other") + ":predict", {"instances": [1.0]})
    assert missing == (404, {"error": "Servable not found for request: Latest(other)"})
    plane.cli("delete", "pod", "tf-serving")


def test_the_seldon_mock_classifier_standin_serves_the_microservice_api(plane, mirrored) -> None:
    port = free_port()
    apply(plane, pod("mock-classifier", "seldonio/mock_classifier_rest:1.3",
                     env=[{"name": "PREDICTIVE_UNIT_HTTP_SERVICE_PORT", "value": str(port)}]))
    base = f"http://{running_ip(plane, 'mock-classifier')}:{port}"
    assert answering("GET", base + "/health/ping") == (200, "pong")
    status, body = http("POST", base + "/predict", {"data": {"ndarray": [[1.0, 2.0, 5.0]]}})
    assert status == 200 and body == {"data": {"names": ["proba"], "ndarray": [[0.43782349911420193]]}, "meta": {}}
    status, body = http("POST", base + "/predict", {"data": {"ndarray": [["a"]]}})
    assert status == 400 and body["status"]["reason"] == "MICROSERVICE_BAD_DATA"
    plane.cli("delete", "pod", "mock-classifier")


def test_seed_000s_seldondeployment_calls_its_image_unit_in_pods_of_its_own(plane, mirrored) -> None:
    """Seed 000's SeldonDeployment: the unit is the image ``seldonio/mock_classifier_rest:1.3``, run as
    a Deployment of its own whose pods the graph's executor calls at their ``status.podIP``."""
    sdep = {
        "apiVersion": "machinelearning.seldon.io/v1", "kind": "SeldonDeployment", "metadata": {"name": "seldon-model"},
        "spec": {"name": "test-deployment", "predictors": [{
            "name": "example", "replicas": 1,
            "componentSpecs": [{
                "hpaSpec": {"maxReplicas": 3, "minReplicas": 1, "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "targetAverageUtilization": 10}}]},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "classifier", "image": "seldonio/mock_classifier_rest:1.3",
                    "imagePullPolicy": "IfNotPresent", "resources": {"requests": {"cpu": "0.5"}}}]}}],
            "graph": {"name": "classifier", "type": "MODEL", "children": [], "endpoint": {"type": "REST"}}}]},
    }
    apply(plane, sdep)

    def available() -> dict | None:
        obj = plane.get("sdep", "seldon-model")
        assert (obj.get("status") or {}).get("state") != "Failed", obj["status"].get("description")
        return obj if obj["status"].get("state") == "Available" else None

    obj = poll(available, timeout=180, interval=0.3, what="seldon-model Available")
    unit = plane.get("deployment", "seldon-model-example-classifier")
    assert unit["metadata"]["ownerReferences"][0]["kind"] == "SeldonDeployment"
    pods = json.loads(plane.cli("get", "pods", "-l", "seldon.io/unit=classifier", "-o", "json").stdout)["items"]
    assert len(pods) == 1 and pods[0]["status"]["podIP"]
    assert pods[0]["status"]["containerStatuses"][0]["imageID"].startswith(
        "docker.io/seldonio/mock_classifier_rest@sha256:")
    status, body = http("POST", obj["status"]["address"]["url"], {"data": {"ndarray": [[1.0, 2.0, 5.0]]}})
    assert status == 200, body
    assert body["data"]["ndarray"] == [[0.43782349911420193]] and body["data"]["names"] == ["proba"]
    plane.cli("delete", "sdep", "seldon-model")
    poll(lambda: plane.cli("get", "deployment", "seldon-model-example-classifier", check=False).returncode != 0,
         timeout=60, interval=0.2, what="the unit's Deployment to go with its SeldonDeployment")


def test_seed_001s_tensorflow_serving_deployment_of_3_behind_its_service(plane, mirrored) -> None:
    """Seed 001's row with the stand-in: 3 replicas of ``tensorflow/serving`` behind one Service,
    every replica answering through it. On the pod network, as the seed writes it: all three on
    8501, behind a ``LoadBalancer`` reached at its ingress address. Without one (pods share the
    host's network) each replica takes its own port (``--rest_api_port=$(PORT)``) behind a ClusterIP."""
    on_network = pod_network_on(plane.home)
    for obj in seed_001_manifests(3, fixed_port=on_network, service_type="LoadBalancer" if on_network else "ClusterIP"):
        apply(plane, obj)
    poll(lambda: plane.get("deployment", "tf-serving").get("status", {}).get("readyReplicas") == 3,
         timeout=180, interval=0.3, what="3 ready replicas")
    if on_network:
        ingress = poll(lambda: (plane.get("service", "tf-serving").get("status", {}).get("loadBalancer", {})
                                .get("ingress") or [None])[0], timeout=30, what="the LoadBalancer's address")
        host = ingress["ip"]
    else:
        host = plane.get("service", "tf-serving")["spec"]["clusterIP"]
    url = f"http://{host}:8501/v1/models/half_plus_two:predict"
    seen: set[str] = set()

    def every_replica_answered() -> bool:
        request = urllib.request.Request(url, data=b'{"instances": [1.0, 2.0, 5.0]}', method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.loads(response.read()) == {"predictions": [2.5, 3.0, 4.5]}
            seen.add(response.headers["X-Standin-Host"])
        return len(seen) == 3

    poll(every_replica_answered, timeout=60, interval=0.01, what="each replica to answer through the Service")
    pods = json.loads(plane.cli("get", "pods", "-l", "app=tf-serving", "-o", "json").stdout)["items"]
    assert seen == {p["metadata"]["name"] for p in pods}
    plane.cli("delete", "deployment", "tf-serving")
    plane.cli("delete", "service", "tf-serving")


def test_an_image_no_host_has_backs_off_naming_every_host(plane, mirrored, public_mirror) -> None:  # noqa: F811
    apply(plane, pod("absent", "team/absent:1"))

    def backing_off() -> dict | None:
        statuses = (plane.get("pod", "absent").get("status") or {}).get("containerStatuses") or []
        state = (statuses[0].get("state") or {}).get("waiting") or {} if statuses else {}
        return state if state.get("reason") == "ImagePullBackOff" else None

    message = poll(backing_off, timeout=60, interval=0.1, what="absent to back off")["message"]
    assert message.startswith('Back-off pulling image "team/absent:1": ErrImagePull: ')
    assert f"{public_mirror.host} (mirror" in message and "(upstream" in message, message
    assert message.index(public_mirror.host) < message.index("(upstream"), message
    assert "not found" in message and "is unreachable" in message, message
    plane.cli("delete", "pod", "absent")
