"""Which port a probe or a Service reaches on a pod whose controller moved its declared port."""

from __future__ import annotations

from trimaran.controllers.probes import resolve_port


def pod(annotations: dict[str, str], ports: list[dict]) -> dict:
    return {"metadata": {"annotations": annotations}, "spec": {"containers": [{"name": "c", "ports": ports}]}}


def test_a_deployment_pods_own_port_stands_in_for_the_declared_number() -> None:
    moved = pod({"trimaran.io/ports": '{"8080":20311}'}, [{"name": "http", "containerPort": 20311}])
    assert resolve_port(moved, 8080) == 20311
    assert resolve_port(moved, "8080") == 20311
    assert resolve_port(moved, "http") == 20311
    assert resolve_port(moved, 9090) == 9090  # not declared: as written
    assert resolve_port(moved, "metrics") is None


def test_an_inference_service_replica_answers_on_its_http_port() -> None:
    replica = pod({"serving.trimaran.io/ports": "20400,20401"}, [{"name": "h2c", "containerPort": 8080}])
    assert resolve_port(replica, 8080) == 20400  # KServe's declared port is the replica's HTTP port
    assert resolve_port(replica, "h2c") == 20400
    assert resolve_port(replica, 20401) == 20401


def test_a_plain_pod_keeps_its_numbers() -> None:
    plain = pod({}, [{"name": "web", "containerPort": 5000}])
    assert resolve_port(plain, 5000) == 5000
    assert resolve_port(plain, "web") == 5000
