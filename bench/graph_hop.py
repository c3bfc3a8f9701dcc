"""What an InferenceGraph hop costs: V1 predict latency straight to an sklearn InferenceService (its
``status.url``) and through a 1-step Sequence InferenceGraph (its ``status.url``) over the same service,
sequential keep-alive requests on a control plane of its own. Prints p50 and p99 of each (and of the graph
router's replica without the router in front of it) and the p50 the graph adds."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent


def interleaved(targets: dict[str, tuple[str, str]], body: bytes, requests: int) -> dict[str, tuple[float, float]]:
    """p50 and p99 in milliseconds of each target (name -> (url, path)), one request to each in turn so that
    a burst of load on the machine falls on all of them alike."""
    conns = {}
    for name, (url, _) in targets.items():
        parts = urlsplit(url)
        conns[name] = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"content-type": "application/json"}
    samples: dict[str, list[float]] = {name: [] for name in targets}
    for _ in range(requests):
        for name, (_, path) in targets.items():
            start = time.perf_counter()
            conns[name].request("POST", path, body=body, headers=headers)
            response = conns[name].getresponse()
            response.read()
            samples[name].append(time.perf_counter() - start)
            assert response.status == 200, (name, response.status)
    out = {}
    for name, values in samples.items():
        values.sort()
        out[name] = (values[len(values) // 2] * 1e3, values[int(len(values) * 0.99)] * 1e3)
    return out


def wait_ready(cli: list[str], env: dict, kind: str, name: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run([*cli, "get", kind, name, "-o", "json"], env=env, capture_output=True, text=True)
        if out.returncode == 0:
            obj = json.loads(out.stdout)
            conds = (obj.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
                return obj
        if time.monotonic() > deadline:
            raise TimeoutError(f"{kind} {name} not Ready: {out.stdout or out.stderr}")
        time.sleep(0.3)


def _replica(home: Path, service: str) -> str:
    """The address of ``service``'s one replica, from the router's routes file."""
    routes = json.loads((home / "serving" / "routes.json").read_text())
    for entry in routes["services"].values():
        for name, revision in (entry.get("revisions") or {}).items():
            if name.startswith(f"{service}-predictor") and revision.get("endpoints"):
                return revision["endpoints"][0]
    raise LookupError(f"no replica of {service} in the routes file")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    args = parser.parse_args()
    import joblib
    from sklearn.linear_model import LinearRegression

    from trimaran.server.daemon import start_server, stop_pods, stop_server

    tmp = Path(tempfile.mkdtemp(prefix="graph-hop-"))
    home = tmp / "home"
    env = dict(os.environ, TRIMARAN_HOME=str(home), PYTHONPATH=str(REPO))
    os.environ["TRIMARAN_HOME"] = str(home)
    cli = [sys.executable, "-m", "trimaran.cli"]
    model = tmp / "model"
    model.mkdir()
    joblib.dump(LinearRegression().fit([[0.0, 0.0], [1.0, 1.0], [2.0, 0.0]], [0.0, 2.0, 2.0]), model / "model.joblib")
    docs = [{"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "m"},
             "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}, "storageUri": str(model)}}}},
            {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "InferenceGraph", "metadata": {"name": "g"},
             "spec": {"nodes": {"root": {"routerType": "Sequence", "steps": [{"serviceName": "m"}]}}}}]
    (tmp / "docs.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    start_server(home=home)
    try:
        subprocess.run([*cli, "apply", "-f", str(tmp / "docs.json")], env=env, check=True, capture_output=True)
        direct_url = wait_ready(cli, env, "isvc", "m")["status"]["url"]
        graph_url = wait_ready(cli, env, "ig", "g")["status"]["url"]
        body = json.dumps({"instances": [[1.0, 2.0]]}).encode()
        targets = {"direct": (direct_url, "/v1/models/m:predict"), "graph": (graph_url, "/"),
                   "replica": (f"http://{_replica(home, 'g-graph')}", "/")}
        interleaved(targets, body, 200)  # warm every path's connections
        got = interleaved(targets, body, args.requests)
        print(f"direct to the InferenceService: p50 {got['direct'][0]:.3f} ms p99 {got['direct'][1]:.3f} ms")
        print(f"through a 1-step Sequence InferenceGraph: p50 {got['graph'][0]:.3f} ms p99 {got['graph'][1]:.3f} ms")
        print(f"to the graph router's replica, skipping the router in front of it: p50 {got['replica'][0]:.3f} ms "
              f"p99 {got['replica'][1]:.3f} ms")
        print(f"added by the graph hop: p50 {got['graph'][0] - got['direct'][0]:+.3f} ms ({args.requests} requests "
              f"to each, interleaved; load average {os.getloadavg()[0]:.1f})")
    finally:
        stop_server(home)
        stop_pods(home, grace_seconds=1.0)


if __name__ == "__main__":
    main()
