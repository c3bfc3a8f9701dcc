"""The environment each replica gets is the Kubeflow operator's contract (training-operator.md §1)."""

from __future__ import annotations

import json
import textwrap

from tests.helpers import pod_network_on, poll

DUMP_ENV = textwrap.dedent("""
    import json, os, socket, sys
    name = os.environ["POD_NAME"]
    peers = {}
    for var in ("MASTER_ADDR",):
        if var in os.environ:
            peers[var] = socket.gethostbyname(os.environ[var])
    if "TF_CONFIG" in os.environ:
        for addrs in json.loads(os.environ["TF_CONFIG"])["cluster"].values():
            for addr in addrs:
                peers[addr] = socket.gethostbyname(addr.rsplit(":", 1)[0])
    out = {"env": dict(os.environ), "hostname": socket.gethostname(), "resolved": peers}
    with open(f"/out/.{name}.tmp", "w") as fh:  # whole or not at all, for a reader that polls
        json.dump(out, fh)
    os.replace(f"/out/.{name}.tmp", f"/out/{name}.json")
""")


def _replica(name: str, replicas: int, container: str, claim: str) -> str:
    return textwrap.indent(textwrap.dedent(f"""
        {name}:
          replicas: {replicas}
          restartPolicy: Never
          template:
            spec:
              containers:
                - name: {container}
                  image: python:3.11
                  command: ["python", "-c", {json.dumps(DUMP_ENV)}]
                  env:
                    - name: POD_NAME
                      valueFrom:
                        fieldRef:
                          fieldPath: metadata.name
                  volumeMounts:
                    - name: out
                      mountPath: /out
              volumes:
                - name: out
                  persistentVolumeClaim:
                    claimName: {claim}
    """), "    ")


def test_tfjob_gets_operator_tf_config(plane, tmp_path):
    manifest = tmp_path / "tfjob.yaml"
    manifest.write_text(
        # AllWorkers: the job succeeds once every worker has written its dump (by default worker 0's
        # end is enough, and worker 1 may still be starting on a busy machine).
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: envtf\nspec:\n  successPolicy: AllWorkers\n"
        "  tfReplicaSpecs:"
        + _replica("PS", 1, "tensorflow", "envtf-out") + _replica("Worker", 2, "tensorflow", "envtf-out")
    )
    plane.cli("apply", "-f", str(manifest))
    plane.cli("wait", "tfjob/envtf", "--for=condition=Succeeded", "--timeout=120s")
    out = plane.home / "volumes" / "default" / "envtf-out"
    # The PS is no worker: the job does not wait for it (upstream's PS never ends), and on a busy
    # machine it can still be starting when the workers are done.
    poll(lambda: len(list(out.glob("*.json"))) == 3, timeout=30, what="the PS to write too")
    dumps = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert set(dumps) == {"envtf-ps-0", "envtf-worker-0", "envtf-worker-1"}
    configs = {name: json.loads(d["env"]["TF_CONFIG"]) for name, d in dumps.items()}
    raw = dumps["envtf-worker-1"]["env"]["TF_CONFIG"]
    assert " " not in raw and raw.startswith('{"cluster":{"ps":[')  # Go's compact JSON, keys sorted
    cluster = configs["envtf-ps-0"]["cluster"]
    assert list(cluster) == ["ps", "worker"]
    hosts = [a.rsplit(":", 1)[0] for a in cluster["worker"]]
    assert hosts == ["envtf-worker-0.default.svc", "envtf-worker-1.default.svc"]
    ports = [int(a.rsplit(":", 1)[1]) for addrs in cluster.values() for a in addrs]
    if pod_network_on(plane.home):
        assert ports == [2222] * 3, "each replica listens on the operator's port at its own pod's address"
    else:
        assert len(set(ports)) == 3, "each replica listens on its own port"
    assert configs["envtf-worker-1"]["task"] == {"type": "worker", "index": 1}
    assert configs["envtf-ps-0"]["task"] == {"type": "ps", "index": 0}
    assert all(c["environment"] == "cloud" and c["cluster"] == cluster for c in configs.values())
    pod_ips = {name: plane.get("Pod", name)["status"]["podIP"] for name in dumps}
    for d in dumps.values():
        if pod_network_on(plane.home):
            # Each replica name resolves to that replica's pod IP.
            assert all(ip == pod_ips[host.split(".")[0]] for host, ip in d["resolved"].items()
                       if host.split(".")[0] in pod_ips), d["resolved"]
        else:
            assert all(ip.startswith("127.") for ip in d["resolved"].values()), d["resolved"]
    assert dumps["envtf-worker-0"]["hostname"] == "envtf-worker-0"
    assert dumps["envtf-worker-0"]["env"]["CUDA_VISIBLE_DEVICES"] == ""

    job = plane.get("tfjob", "envtf")
    assert job["status"]["replicaStatuses"]["Worker"]["succeeded"] == 2
    types = [c["type"] for c in job["status"]["conditions"] if c["status"] == "True"]
    assert types[-1] == "Succeeded" and "Created" in types


def test_single_replica_tfjob_has_no_tf_config(plane, tmp_path):
    manifest = tmp_path / "tf1.yaml"
    manifest.write_text(
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata:\n  name: single\nspec:\n  tfReplicaSpecs:"
        + _replica("Worker", 1, "tensorflow", "single-out")
    )
    plane.cli("apply", "-f", str(manifest))
    plane.cli("wait", "tfjob/single", "--for=condition=Succeeded", "--timeout=60s")
    dump = json.loads((plane.home / "volumes" / "default" / "single-out" / "single-worker-0.json").read_text())
    assert "TF_CONFIG" not in dump["env"]


def test_pytorchjob_gets_master_rank_world_size(plane, tmp_path):
    manifest = tmp_path / "pt.yaml"
    manifest.write_text(
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: envpt\nspec:\n  pytorchReplicaSpecs:"
        + _replica("Master", 1, "pytorch", "envpt-out") + _replica("Worker", 3, "pytorch", "envpt-out")
    )
    plane.cli("apply", "-f", str(manifest))
    plane.cli("wait", "pytorchjob/envpt", "--for=condition=Succeeded", "--timeout=120s")
    out = plane.home / "volumes" / "default" / "envpt-out"
    poll(lambda: len(list(out.glob("*.json"))) == 4, timeout=30, what="all four replicas to write")
    envs = {p.stem: json.loads(p.read_text())["env"] for p in out.glob("*.json")}
    ports = {e["MASTER_PORT"] for e in envs.values()}
    assert len(ports) == 1
    for name, rank in (("envpt-master-0", 0), ("envpt-worker-0", 1), ("envpt-worker-1", 2), ("envpt-worker-2", 3)):
        e = envs[name]
        assert e["MASTER_ADDR"] == e["PET_MASTER_ADDR"] == "envpt-master-0"
        assert e["RANK"] == e["PET_NODE_RANK"] == str(rank)
        assert e["WORLD_SIZE"] == "4" and e["PET_NNODES"] == "4" and e["PET_NPROC_PER_NODE"] == "auto"
        assert e["PYTHONUNBUFFERED"] == "1"
    dump = json.loads((out / "envpt-worker-2.json").read_text())
    if pod_network_on(plane.home):
        assert ports == {"23456"}, "the operator's MASTER_PORT, at the master pod's own address"
        assert dump["resolved"]["MASTER_ADDR"] == plane.get("Pod", "envpt-master-0")["status"]["podIP"]
    else:
        assert dump["resolved"]["MASTER_ADDR"].startswith("127.")
