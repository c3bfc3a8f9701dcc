"""Revisions and KServe's canary rule, and the replica pods built for a revision."""

from __future__ import annotations

from pathlib import Path

import pytest

from trimaran.controllers.serving.pods import replica_pod
from trimaran.controllers.serving.revisions import plan_traffic, revision_name, spec_hash

R1, R2, R3 = (revision_name("iris", "predictor", n) for n in (1, 2, 3))


def test_revision_names_and_hash_ignore_live_fields() -> None:
    assert R2 == "iris-predictor-00002"
    base = {"model": {"storageUri": "pvc://m/1"}, "minReplicas": 1}
    assert spec_hash(base) == spec_hash({**base, "minReplicas": 3, "maxReplicas": 5, "canaryTrafficPercent": 10,
                                         "scaleTarget": 4, "scaleMetric": "rps"})
    assert spec_hash(base) != spec_hash({**base, "model": {"storageUri": "pvc://m/2"}})
    assert spec_hash(base) != spec_hash({**base, "containerConcurrency": 4})


def traffic(rollout) -> set[tuple]:
    return {(t["revisionName"], t["percent"], t["latestRevision"], t.get("tag")) for t in rollout.traffic}


# (revisions, ever ready, canary %, recorded latestRolledout, expected traffic, expected latestRolledout, previous)
CASES = [
    # nothing ready yet: no traffic
    ([R1], set(), None, None, set(), None, None),
    # first revision ready: 100 %, rolled out, whatever the canary percent says
    ([R1], {R1}, 10, None, {(R1, 100, True, None)}, R1, None),
    # a new revision still starting: the rolled-out one keeps 100 %
    ([R1, R2], {R1}, None, R1, {(R1, 100, True, None)}, R1, None),
    # new revision ready, no canary: it takes 100 % and the old one is previous
    ([R1, R2], {R1, R2}, None, R1, {(R2, 100, True, None)}, R2, R1),
    # canary 10 %
    ([R1, R2], {R1, R2}, 10, R1, {(R2, 10, True, "latest"), (R1, 90, False, "prev")}, R1, None),
    # rollback: canary 0 %
    ([R1, R2], {R1, R2}, 0, R1, {(R2, 0, True, "latest"), (R1, 100, False, "prev")}, R1, None),
    # promotion: 100
    ([R1, R2], {R1, R2}, 100, R1, {(R2, 100, True, None)}, R2, R1),
    # a second canary while the first is out: the newest ready revision is the canary, prev stays R1
    ([R1, R2, R3], {R1, R2, R3}, 20, R1, {(R3, 20, True, "latest"), (R1, 80, False, "prev")}, R1, None),
    # the newest never became ready: the last ready canary keeps its share
    ([R1, R2, R3], {R1, R2}, 20, R1, {(R2, 20, True, "latest"), (R1, 80, False, "prev")}, R1, None),
]


@pytest.mark.parametrize(("revisions", "ready", "canary", "rolled", "expected", "latest_rolled", "previous"), CASES)
def test_plan_traffic(revisions, ready, canary, rolled, expected, latest_rolled, previous) -> None:
    rollout = plan_traffic(revisions, ready, canary, rolled, None)
    assert traffic(rollout) == expected
    assert sum(t["percent"] for t in rollout.traffic) in ((0,) if not expected else (100,))
    assert rollout.latest_rolledout == latest_rolled
    assert rollout.previous_rolledout == previous
    assert rollout.latest_created == revisions[-1]


def _isvc() -> dict:
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "iris", "namespace": "models", "uid": "u-1"},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": "pvc://out/m"}}}}


def test_model_replica_runs_the_model_server_with_the_claim_read_only() -> None:
    revision = {"name": R1, "spec": {"containerConcurrency": 2, "timeout": 30,
                                     "batcher": {"maxBatchSize": 8, "maxLatency": 5}},
                "model": {"modelFormat": {"name": "sklearn"}, "storageUri": "pvc://out/m", "args": ["--workers", "2"],
                          "resources": {"requests": {"cpu": "1"}}}}
    pod = replica_pod(_isvc(), "predictor", revision, 0, [20100], None, None)
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "trimaran.serving"]
    args = container["args"]
    assert args[:4] == ["--model-name", "iris", "--model-dir", "/mnt/pvc/m"]
    assert args[args.index("--http-port") + 1] == "20100" and args[args.index("--grpc-port") + 1] == "0"
    assert args[args.index("--model-format") + 1] == "sklearn"
    assert args[args.index("--max-batch-size") + 1] == "8" and args[args.index("--request-timeout") + 1] == "30"
    assert args[-2:] == ["--workers", "2"]  # the user's args last, so they win
    assert pod["spec"]["volumes"] == [{"name": "kserve-pvc-source",
                                       "persistentVolumeClaim": {"claimName": "out", "readOnly": True}}]
    assert container["volumeMounts"][0]["readOnly"] is True
    assert pod["metadata"]["labels"]["serving.knative.dev/revision"] == R1
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert pod["spec"]["restartPolicy"] == "Always"


def test_local_path_is_mounted_at_mnt_models(tmp_path: Path) -> None:
    revision = {"name": R1, "spec": {}, "model": {"modelFormat": {"name": "onnx"}, "storageUri": str(tmp_path)}}
    pod = replica_pod(_isvc(), "predictor", revision, 1, [20100, 20101], tmp_path, None)
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == str(tmp_path)
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--model-dir") + 1] == "/mnt/models"
    assert args[args.index("--grpc-port") + 1] == "20101"
    assert pod["metadata"]["name"] == f"{R1}-deployment-1"


def test_transformer_gets_port_and_predictor_host() -> None:
    revision = {"name": "iris-transformer-00001",
                "spec": {"containers": [{"name": "kserve-container", "image": "t",
                                         "command": ["python", "t.py"], "args": ["--port", "$(PORT)"],
                                         "readinessProbe": {"httpGet": {"path": "/healthz"}}}]}}
    pod = replica_pod(_isvc(), "transformer", revision, 0, [20200], None, "127.0.0.1:20300")
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["PORT"] == "20200" and env["PREDICTOR_HOST"] == "127.0.0.1:20300" and env["MODEL_NAME"] == "iris"
    assert env["PREDICTOR_PROTOCOL"] == "v1"
    assert pod["metadata"]["annotations"]["serving.trimaran.io/probe-path"] == "/healthz"


def test_routes_file_keeps_a_grpc_port_per_predictor_service_and_frees_it(tmp_path: Path) -> None:
    from trimaran.controllers.ports import PortAllocator
    from trimaran.controllers.serving.routes import RoutesFile

    ports = PortAllocator()
    routes = RoutesFile(tmp_path, ports)
    http, grpc = routes.service_port("models/iris"), routes.service_port("models/iris", grpc=True)
    routes.set_services("models/iris", {"models/iris": {"port": http, "grpcPort": grpc}})
    assert routes.service_port("models/iris", grpc=True) == grpc  # recorded: stable across passes
    assert RoutesFile(tmp_path, PortAllocator()).data["services"]["models/iris"]["grpcPort"] == grpc

    routes.move("models/iris", grpc=True)  # the router could not bind it: a new one, the URL's port stays
    moved = routes.service_port("models/iris", grpc=True)
    assert moved not in (http, grpc) and routes.service_port("models/iris") == http
    routes.set_services("models/iris", {"models/iris": {"port": http, "grpcPort": moved}})

    assert {http, grpc, moved} <= ports._reserved  # the moved-from port stays taken: another process holds it
    routes.set_services("models/iris", {})
    assert not {http, moved} & ports._reserved and grpc in ports._reserved
