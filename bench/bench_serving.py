"""Model serving: the same scikit-learn digits model behind Trimaran, MLServer, KServe, BentoML and Seldon Core's
Python wrapper, one load generator.

    .venv/bin/python bench/bench_serving.py [--duration 4] [--rounds 3] [--quick]
        [--peers mlserver,kserve,bentoml,seldon] [--no-defaults] [--skip-install] [--json out.json] [--markdown]
    .venv/bin/python bench/bench_serving.py --report out.json [--markdown]   # reprint a run

(about 12 minutes with the defaults; --quick: one round of 2 s runs without the peers' defaults)

Issue 4's targets, measured on loopback with wrk (V2 REST, FP32 [1,64] and [32,64] bodies, c=1/16/64):
- throughput at c=64 at least 3x the better peer, for 1-row and for 32-row bodies;
- p99 latency no worse than the better peer's at every concurrency;
- with adaptive batching (c=64, 1-row bodies), rows/s at least 60% of the in-process `predict`
  ceiling measured in the same run (1-row `predict` calls/s x cores, measured right after each
  batching run; the 32-row rate is printed beside it);
- gRPC ModelInfer throughput and p99 beside REST at c=64, driven by h2load (bench/serving/h2load.py: C, as wrk
  is for REST, so that the ratio gRPC/REST is not the load generator's); req/s from runs without h2load's
  per-request log, percentiles from runs with it; our REST at c=64 is run right beside each of our gRPC runs,
  and the gRPC/REST ratio is the median of those pairs.

Each server takes the body of its own protocol, with the same rows: V2 (Trimaran, MLServer, KServe), Seldon's
SeldonMessage `{"data": {"ndarray": ...}}` at /api/v1.0/predictions (Trimaran's Seldon executor, what a
SeldonDeployment runs, and `seldon-core-microservice`, Seldon Core 1.18's gunicorn + Flask wrapper, on
bench/serving/seldon_digits.py), BentoML's `{"input": ...}` at /predict (bench/serving/bentoml_digits.py);
the summary compares Trimaran's V2 REST, Trimaran's InferenceService and Trimaran's Seldon protocol each with the
best peer. "Trimaran InferenceService" is Trimaran as a user reaches it (`--no-isvc` skips it): a control plane of its
own runs an sklearn InferenceService on the same model.joblib with one replica per core, measured at its `status.url`
(the router in front of the replicas), V2 REST only; "Trimaran InferenceService, Standard mode" is the same in
KServe's Standard deployment mode (a Deployment behind a LoadBalancer Service: the kernel forwards, no router).
One LogisticRegression is trained on digits and saved once as model.joblib; each server loads
that file from a model dir laid out its way. The peers live in their own venvs under
bench/.peers/ (bench/serving/peers.py installs them, pinned, once). Every server gets as many
processes as the machine has cores ("cores" configurations: Trimaran --workers, MLServer
parallel_workers, KServe --workers, per-request logging off for the peers); each peer also runs
as it starts by default ("default" configurations). All servers run at once and idle while
another is measured; the runs are interleaved per cell (rows x concurrency), rotating the order,
so load from other work on this shared machine hits all of them alike. Every server's answer
is checked against in-process `predict` (REST, and gRPC where measured) before any timing, and
again under load (distinct rows sent while wrk runs, so that batching mixes them with its requests).
Beside req/s the tables give the CPU the server used (psutil, its process tree) and req per
CPU-second, which depends less on what else runs on the machine.
A benchmark reports, it does not gate: the exit status is 0 whatever the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from serving import h2load, peers  # noqa: E402

PY = sys.executable
MODEL = "digits"
LUA = HERE / "serving" / "infer.lua"
KSERVE_SCRIPT = HERE / "serving" / "kserve_digits.py"
CORES = os.cpu_count() or 1
# gRPC at 64 calls in flight, so many per connection: 64 connections of one call (as wrk's 64), and 8 of 8 (how a
# gRPC client sends: a grpcio channel multiplexes its calls over one connection).
GRPC_STREAMS = (1, 8)


# ---------------------------------------------------------------------------------------------
# model, bodies, ceiling


def train(workdir: Path):
    import joblib
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    X, y = load_digits(return_X_y=True)
    model = LogisticRegression(max_iter=5000).fit(X, y)
    path = workdir / "model.joblib"
    joblib.dump(model, path)
    return model, X.astype(np.float32), path


def rest_body(x, protocol: str = "v2") -> bytes:
    """The REST body of rows ``x`` in a server's protocol: V2, Seldon's SeldonMessage, or BentoML's."""
    import orjson

    if protocol == "seldon":
        return orjson.dumps({"data": {"ndarray": x.tolist()}})
    if protocol == "bentoml":
        return orjson.dumps({"input": x.tolist()})
    return orjson.dumps({"inputs": [{"name": "input-0", "shape": list(x.shape), "datatype": "FP32",
                                     "data": x.ravel().tolist()}]})


def grpc_request(x) -> bytes:
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest(model_name=MODEL)
    tensor = req.inputs.add(name="input-0", datatype="FP32", shape=list(x.shape))
    tensor.contents.fp32_contents.extend(x.ravel().tolist())
    return req.SerializeToString()


def ceiling(model, X, seconds: float, sizes=(1, 32)) -> dict:
    """In-process `model.predict` calls/s on one core, on a 1-row and a 32-row array."""
    out = {}
    for rows in sizes:
        x = X[:rows]
        for _ in range(200):
            model.predict(x)
        n, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds:
            for _ in range(100):
                model.predict(x)
            n += 100
        out[rows] = {"calls_per_s": n / elapsed, "rows_per_s": n * rows / elapsed}
    return out


# ---------------------------------------------------------------------------------------------
# servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    name: str            # short key: trimaran, mlserver, mlserver-default, ...
    label: str           # what the table shows
    peer: str            # "trimaran", "mlserver" or "kserve"
    argv: list[str]
    cwd: Path
    settings: str        # what we configured, in words
    http_port: int = field(default_factory=free_port)
    grpc_port: int = field(default_factory=free_port)
    env: dict = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    log: Path | None = None
    error: str | None = None   # why it is not measured
    grpc_error: str | None = None
    grpc_answer_sizes: dict[int, int] = field(default_factory=dict)  # rows -> size of a correct answer's message
    protocol: str = "v2"  # the REST body it takes: v2, seldon (SeldonMessage) or bentoml ({"input": ...})
    path: str = f"/v2/models/{MODEL}/infer"
    ready_path: str = f"/v2/models/{MODEL}/ready"
    has_grpc: bool = True  # serves V2 gRPC ModelInfer on grpc_port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}{self.path}"

    def start(self, logdir: Path) -> None:
        self.log = logdir / f"{self.name}.log"
        argv = [a.format(http=self.http_port, grpc=self.grpc_port) for a in self.argv]
        self.argv = argv
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env={**os.environ, **self.env},
                                         start_new_session=True)

    def wait_ready(self, timeout: float, in_a_row: int = 10) -> None:
        """Polls model readiness until `in_a_row` answers in a row are 200, each on a new connection
        (a server with several processes behind one port may answer from a process that is ready
        while another is still loading)."""
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.http_port}{self.ready_path}"
        streak = 0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode}; log tail:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    streak = streak + 1 if r.status == 200 else 0
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                streak = 0
            if streak >= in_a_row:
                return
            time.sleep(0.05 if streak else 0.25)
        raise RuntimeError(f"not ready after {timeout:.0f} s; log tail:\n{self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def pids(self) -> list[int]:
        """The server's process tree (the processes it started, for py-spy and CPU accounting)."""
        if not self.proc:
            return []
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            return [root.pid] + [c.pid for c in root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu_seconds(self) -> float:
        """User + system CPU of the server's live processes (children that exited are not counted)."""
        import psutil

        total = 0.0
        for pid in self.pids():
            try:
                t = psutil.Process(pid).cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def stop(self) -> None:
        if not self.proc or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass


def trimaran_server(model_path: Path, root: Path, name: str, workers: int, batch: bool) -> Server:
    mdir = root / name / MODEL
    (mdir / "1").mkdir(parents=True)
    shutil.copy(model_path, mdir / "1" / "model.joblib")
    argv = [PY, "-m", "trimaran.serving", "--model-name", MODEL, "--model-dir", str(mdir),
            "--http-port", "{http}", "--grpc-port", "{grpc}", "--workers", str(workers)]
    settings = f"--workers {workers}"
    if batch:
        argv += ["--max-batch-size", "32", "--max-batch-latency-ms", "2"]
        settings += " --max-batch-size 32 --max-batch-latency-ms 2"
    label = "Trimaran" + (" +batching" if batch else "")
    return Server(name, label, "trimaran", argv, REPO, settings)


@dataclass
class IsvcServer(Server):
    """Trimaran as a user reaches it: a control plane of its own (its home under the bench's temp dir), an
    sklearn InferenceService on the same model.joblib with `workers` replicas (a replica is one model-server
    process, as KServe's are one container each), measured at the InferenceService's `status.url` (the
    router in front of the replicas). Its CPU is the control plane's, the router's and the replicas'."""
    home: Path | None = None
    replicas: int = 1
    base_url: str = ""
    annotations: dict = field(default_factory=dict)  # serving.kserve.io/deploymentMode: Standard for that row

    @property
    def url(self) -> str:
        return f"{self.base_url}{self.path}"

    def start(self, logdir: Path) -> None:
        from trimaran.server.daemon import start_server

        self.log = logdir / f"{self.name}.log"
        os.environ["TRIMARAN_HOME"] = str(self.home)  # start_server's child reads it
        os.environ["PYTHONPATH"] = str(REPO)
        start_server(home=self.home)
        manifest = self.home.parent / "isvc.json"
        manifest.write_text(json.dumps({"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                                        "metadata": {"name": MODEL, "annotations": self.annotations},
                                        "spec": {"predictor": {
                                            "minReplicas": self.replicas, "maxReplicas": self.replicas,
                                            "model": {"modelFormat": {"name": "sklearn"}, "protocolVersion": "v2",
                                                      "storageUri": str(self.cwd)}}}}))
        with open(self.log, "wb") as log:
            subprocess.run([PY, "-m", "trimaran.cli", "apply", "-f", str(manifest)], stdout=log,
                           stderr=subprocess.STDOUT, check=True, env={**os.environ, **self.env})

    def _status(self) -> dict:
        out = subprocess.run([PY, "-m", "trimaran.cli", "get", "isvc", MODEL, "-o", "json"], capture_output=True,
                             text=True, env={**os.environ, "TRIMARAN_HOME": str(self.home)})
        return (json.loads(out.stdout).get("status") or {}) if out.returncode == 0 else {}

    def wait_ready(self, timeout: float, in_a_row: int = 10) -> None:
        deadline = time.monotonic() + timeout
        status: dict = {}
        while time.monotonic() < deadline:
            status = self._status()
            if any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []):
                self.base_url = status["url"].rstrip("/")
                self.http_port = int(self.base_url.rsplit(":", 1)[1])
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"InferenceService not Ready after {timeout:.0f} s: {status.get('conditions')}")
        self.ready_path = f"/v2/models/{MODEL}/ready"
        streak = 0
        while time.monotonic() < deadline and streak < in_a_row:
            try:
                with urllib.request.urlopen(self.base_url + self.ready_path, timeout=2) as r:
                    streak = streak + 1 if r.status == 200 else 0
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                streak = 0
        if streak < in_a_row:
            raise RuntimeError(f"{self.base_url}{self.ready_path} not answering 200")

    def pids(self) -> list[int]:
        """The control plane's process tree and every process whose command line names the home (the pods'
        shims, the router, the replicas: they run from it)."""
        import psutil

        from trimaran.server.daemon import read_server_info

        found: set[int] = set()
        info = read_server_info(self.home) or {}
        try:
            root = psutil.Process(int(info.get("pid") or 0))
            found |= {root.pid, *(c.pid for c in root.children(recursive=True))}
        except (psutil.NoSuchProcess, ValueError):
            pass
        home = str(self.home)
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if any(home in part for part in proc.info["cmdline"] or []):
                found.add(proc.info["pid"])
                found |= {c.pid for c in proc.children(recursive=True)}
        return sorted(found)

    def stop(self) -> None:
        from trimaran.server.daemon import stop_pods, stop_server

        if self.home and self.home.exists():
            stop_server(self.home)
            stop_pods(self.home, grace_seconds=1.0)


def trimaran_isvc_server(model_path: Path, root: Path, workers: int) -> IsvcServer:
    mdir = root / "trimaran-isvc" / "model"
    mdir.mkdir(parents=True)
    shutil.copy(model_path, mdir / "model.joblib")
    return IsvcServer("trimaran-isvc", "Trimaran InferenceService", "trimaran", [], mdir,
                      f"{workers} replicas of 1 worker behind the router, at status.url", has_grpc=False,
                      home=root / "trimaran-isvc" / "home", replicas=workers)


def trimaran_isvc_standard_server(model_path: Path, root: Path, workers: int) -> IsvcServer:
    """The same InferenceService in KServe's Standard mode: a Deployment of `workers` replicas on the pod network
    behind a LoadBalancer Service, whose address is status.url (nftables forwarding, no router); needs the pod
    network (root and the CNI plugins), else the control plane serves it in Knative mode and says so."""
    mdir = root / "trimaran-isvc-std" / "model"
    mdir.mkdir(parents=True)
    shutil.copy(model_path, mdir / "model.joblib")
    return IsvcServer("trimaran-isvc-std", "Trimaran InferenceService, Standard mode (status.url)", "trimaran", [],
                      mdir, f"{workers} replicas of 1 worker behind a LoadBalancer Service (nftables), at status.url",
                      has_grpc=False, home=root / "trimaran-isvc-std" / "home", replicas=workers,
                      annotations={"serving.kserve.io/deploymentMode": "Standard"})


def mlserver_server(model_path: Path, root: Path, name: str, workers: int | None) -> Server:
    """`mlserver start` on a repository with settings.json and digits/model-settings.json."""
    base = root / name
    (base / MODEL).mkdir(parents=True)
    shutil.copy(model_path, base / MODEL / "model.joblib")
    (base / MODEL / "model-settings.json").write_text(json.dumps({
        "name": MODEL, "implementation": "mlserver_sklearn.SKLearnModel",
        "parameters": {"uri": "./model.joblib", "version": "v1"}}))
    server = Server(name, "", "mlserver", [str(peers.venv_python("mlserver").parent / "mlserver"), "start", "."],
                    base, "")
    settings = {"host": "127.0.0.1", "http_port": server.http_port, "grpc_port": server.grpc_port,
                "metrics_port": free_port()}
    if workers is None:
        server.label, server.settings = "MLServer default", "defaults (parallel_workers 1, access log, metrics on)"
    else:
        settings.update(parallel_workers=workers, debug=False, metrics_endpoint=None)
        server.label = f"MLServer {workers} workers"
        server.settings = f"parallel_workers {workers}, debug false (no access log), metrics_endpoint null"
    (base / "settings.json").write_text(json.dumps(settings))
    return server


def kserve_server(model_path: Path, root: Path, name: str, workers: int | None) -> Server:
    mdir = root / name / MODEL
    mdir.mkdir(parents=True)
    shutil.copy(model_path, mdir / "model.joblib")
    argv = [str(peers.venv_python("kserve")), str(KSERVE_SCRIPT), "--model_dir", str(mdir), "--model_name", MODEL,
            "--http_port", "{http}", "--grpc_port", "{grpc}"]
    if workers is None:
        return Server(name, "KServe default", "kserve", argv, mdir.parent,
                      "defaults (--workers 1, latency and access logging on)")
    argv += ["--workers", str(workers), "--enable_latency_logging", "false", "--configure_logging", "false"]
    return Server(name, f"KServe {workers} workers", "kserve", argv, mdir.parent,
                  f"--workers {workers} --enable_latency_logging false --configure_logging false")


def trimaran_seldon_server(model_path: Path, root: Path, workers: int) -> Server:
    """Trimaran's Seldon executor (what a SeldonDeployment runs) with SKLEARN_SERVER, method predict; one process
    per core on one port (SO_REUSEPORT), as the model server's workers."""
    mdir = root / "trimaran-seldon" / MODEL
    mdir.mkdir(parents=True)
    shutil.copy(model_path, mdir / "model.joblib")
    config = mdir.parent / "graph.json"
    config.write_text(json.dumps({"name": MODEL, "namespace": "bench", "predictor": "default", "protocol": "seldon",
                         "graph": {"name": MODEL, "implementation": "SKLEARN_SERVER", "type": "MODEL",
                                   "parameters": [{"name": "method", "value": "predict", "type": "STRING"}]},
                         "sources": {MODEL: {"modelDir": str(mdir)}}}))
    one = (f"{shlex.quote(PY)} -m trimaran.serving.seldon --port {{http}} --reuse-port "
           f"--config @{shlex.quote(str(config))}")
    argv = ["sh", "-c", " & ".join([one] * workers) + " & wait"]
    return Server("trimaran-seldon", "Trimaran Seldon protocol", "trimaran", argv, REPO,
                  f"python -m trimaran.serving.seldon x {workers} (SO_REUSEPORT), SKLEARN_SERVER method predict",
                  protocol="seldon", path="/api/v1.0/predictions", ready_path="/ready", has_grpc=False)


def seldon_server(model_path: Path, root: Path, workers: int | None) -> Server:
    """Seldon Core 1.18's Python wrapper (seldon-core-microservice: gunicorn + Flask) on a wrapper-shaped class."""
    argv = [str(peers.venv_python("seldon").parent / "seldon-core-microservice"), "seldon_digits.Digits",
            "--service-type", "MODEL", "--http-port", "{http}", "--grpc-port", "{grpc}",
            "--metrics-port", str(free_port()), "--log-level", "WARNING"]
    env = {"MODEL_PATH": str(model_path), "PYTHONPATH": str(HERE / "serving")}
    if workers is None:
        return Server("seldon-default", "Seldon wrapper default", "seldon", argv, HERE / "serving",
                      "defaults (1 gunicorn worker)", env=env, protocol="seldon", path="/api/v1.0/predictions",
                      ready_path="/health/ping", has_grpc=False)
    argv += ["--workers", str(workers)]
    return Server("seldon", f"Seldon wrapper {workers} workers", "seldon", argv, HERE / "serving",
                  f"--workers {workers} (gunicorn)", env=env, protocol="seldon", path="/api/v1.0/predictions",
                  ready_path="/health/ping", has_grpc=False)


def bentoml_server(model_path: Path, root: Path, workers: int | None) -> Server:
    """`bentoml serve` on bench/serving/bentoml_digits.py (its own JSON protocol, POST /predict)."""
    argv = [str(peers.venv_python("bentoml").parent / "bentoml"), "serve", "bentoml_digits:Digits",
            "--host", "127.0.0.1", "--port", "{http}"]
    env = {"MODEL_PATH": str(model_path), "BENTOML_DO_NOT_TRACK": "true", "BENTO_WORKERS": str(workers or 1)}
    name, label, settings = (("bentoml-default", "BentoML default", "defaults (1 worker)") if workers is None else
                             ("bentoml", f"BentoML {workers} workers", f"@bentoml.service(workers={workers})"))
    return Server(name, label, "bentoml", argv, HERE / "serving", settings, env=env, protocol="bentoml",
                  path="/predict", ready_path="/readyz", has_grpc=False)


# ---------------------------------------------------------------------------------------------
# correctness


def _decode_rest_outputs(payload) -> list[list]:
    if isinstance(payload, list):  # BentoML: the array itself
        return [payload]
    if "data" in payload:  # SeldonMessage
        data = payload["data"]
        return [data.get("ndarray", (data.get("tensor") or {}).get("values"))]
    return [o.get("data") for o in payload.get("outputs", [])]


def check_rest(server: Server, body: bytes, expected: list[int], tries: int = 8) -> None:
    """POSTs the body `tries` times (new connection each); every answer must match `predict`."""
    for _ in range(tries):
        _check_rest_once(server, body, expected)


def _check_rest_once(server: Server, body: bytes, expected: list[int]) -> None:
    req = urllib.request.Request(server.url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            payload = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"HTTP {exc.code}: {exc.read()[:300]!r}") from exc
    outs = _decode_rest_outputs(payload)
    for data in outs:
        flat = _flatten(data)
        if len(flat) == len(expected) and all(int(a) == b for a, b in zip(flat, expected, strict=True)):
            return
    raise RuntimeError(f"REST answer does not match predict {expected[:8]}...: {json.dumps(payload)[:400]}")


def check_grpc(server: Server, request: bytes, expected: list[int]) -> int:
    """Checks the answer against predict; returns the size of the answer's message (h2load counts the answers
    that lack one as errors)."""
    import grpc
    import numpy as np
    from tritonclient.grpc import service_pb2

    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        raw = channel.unary_unary(h2load.METHOD)(request, timeout=30)
    resp = service_pb2.ModelInferResponse.FromString(raw)
    dtypes = {"INT64": np.int64, "INT32": np.int32, "FP32": np.float32, "FP64": np.float64}
    for i, out in enumerate(resp.outputs):
        if i < len(resp.raw_output_contents) and out.datatype in dtypes:
            values = np.frombuffer(resp.raw_output_contents[i], dtype=dtypes[out.datatype]).tolist()
        else:
            c = out.contents
            values = list(c.int64_contents or c.int_contents or c.fp32_contents or c.fp64_contents
                          or c.uint64_contents or c.uint_contents)
        if len(values) == len(expected) and all(int(a) == b for a, b in zip(values, expected, strict=True)):
            return len(raw)
    raise RuntimeError(f"gRPC answer does not match predict: {str(resp)[:400]}")


def check_under_load(server: Server, model, X, background_body: Path, n: int = 64) -> str:
    """While wrk loads the server (c=64, 1-row), POSTs `n` different single rows from 8 threads and compares each
    answer with `predict`: with adaptive batching these share batches with wrk's requests, so an answer given
    to the wrong caller, or a batch split wrongly, shows. Returns a line for the report."""
    from concurrent.futures import ThreadPoolExecutor

    load = subprocess.Popen(["wrk", "-t1", "-c64", "-d4s", "-s", str(LUA), server.url], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "WRK_BODY": str(background_body)})
    time.sleep(0.5)
    rows = [X[i % len(X): i % len(X) + 1] for i in range(0, n * 7, 7)]
    expected = [[int(model.predict(r)[0])] for r in rows]

    def one(i: int) -> str | None:
        try:
            _check_rest_once(server, rest_body(rows[i], server.protocol), expected[i])
            return None
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {str(exc)[:200]}"

    with ThreadPoolExecutor(8) as pool:
        failures = [f for f in pool.map(one, range(n)) if f]
    load.wait(timeout=60)
    line = f"{n - len(failures)}/{n} distinct rows answered right under load"
    return line + (f"; first failure: {failures[0]}" if failures else "")


def _flatten(data) -> list:
    out = []
    for v in data if isinstance(data, list) else [data]:
        out.extend(_flatten(v) if isinstance(v, list) else [v])
    return out


# ---------------------------------------------------------------------------------------------
# load


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measured(server: Server, run, *args, **kwargs) -> dict:
    """Runs one load run; adds the CPU the server and the load generator used, in cores."""
    s0, c0, t0 = server.cpu_seconds(), _children_cpu(), time.perf_counter()
    out = run(*args, **kwargs)
    wall = time.perf_counter() - t0
    out["server_cores"] = (server.cpu_seconds() - s0) / wall
    out["client_cores"] = (_children_cpu() - c0) / wall
    return out


def wrk(url: str, body_file: Path, connections: int, seconds: float) -> dict:
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s", "--latency",
           "-s", str(LUA), url]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "WRK_BODY": str(body_file)},
                          timeout=seconds + 60)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("WRK_JSON ")), None)
    if line is None:
        return {"rps": 0.0, "errors": -1, "error_text": (proc.stdout + proc.stderr)[-500:]}
    r = json.loads(line[len("WRK_JSON "):])
    socket_errors = r["connect"] + r["read"] + r["write"] + r["timeout"]
    return {"rps": r["requests"] / (r["duration_us"] / 1e6), "requests": r["requests"],
            "p50_ms": r["p50_us"] / 1e3, "p90_ms": r["p90_us"] / 1e3, "p99_ms": r["p99_us"] / 1e3,
            "max_ms": r["max_us"] / 1e3, "non2xx": r["status"], "socket_errors": socket_errors,
            "errors": r["status"] + socket_errors}


def ensure_wrk() -> str:
    if shutil.which("wrk"):
        return subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    print("installing wrk (apt-get install -y wrk) ...", flush=True)
    subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True)
    subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", "wrk"], check=True,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout.splitlines()[0]


def median_run(runs: list[dict]) -> dict:
    """Median of each figure over the rounds; errors summed (-1 if a run failed to report)."""
    out: dict = {"rounds": len(runs), "all_rps": [round(r.get("rps", 0.0)) for r in runs],
                 "all_p99_ms": [round(r.get("p99_ms", float("nan")), 2) for r in runs]}
    for key in ("rps", "p50_ms", "p90_ms", "p99_ms", "max_ms", "server_cores", "client_cores"):
        values = [r[key] for r in runs if key in r]
        if values:
            out[key] = statistics.median(values)
    out["errors"] = -1 if any(r.get("errors", 0) < 0 for r in runs) else sum(r.get("errors", 0) for r in runs)
    out["non2xx"] = sum(r.get("non2xx", 0) for r in runs)
    out["socket_errors"] = sum(r.get("socket_errors", 0) for r in runs)
    return out


# ---------------------------------------------------------------------------------------------
# report


def fmt(v, spec=",.0f") -> str:
    return "—" if v is None or v != v else format(v, spec)


def per_cpu(r: dict) -> float | None:
    """Requests per CPU-second of the server: what it would do per core if it had the cores to itself."""
    cores = r.get("server_cores")
    return r["rps"] / cores if r.get("rps") and cores and cores > 0.05 else None


def report(res: dict) -> list[str]:
    """Prints the tables and returns the summary lines (ratios vs targets)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    servers = {s["name"]: s for s in res["servers"]}
    table = Table(title=f"V2 REST (wrk -t1, {res['duration']:.0f} s per run, median of {res['rounds']} round(s))")
    for col in ("server", "rows", "c", "req/s", "rows/s", "p50 ms", "p99 ms", "errors", "server CPU", "req/CPU-s",
                "wrk CPU"):
        table.add_column(col, justify="left" if col == "server" else "right")
    for cell in res["rest"]:
        for name, r in cell["results"].items():
            err = r.get("errors", 0)
            table.add_row(servers[name]["label"], str(cell["rows"]), str(cell["c"]), fmt(r.get("rps")),
                          fmt((r.get("rps") or 0) * cell["rows"]), fmt(r.get("p50_ms"), ".2f"),
                          fmt(r.get("p99_ms"), ".2f"),
                          "[red]failed[/red]" if err < 0 else (f"[red]{err}[/red]" if err else "0"),
                          fmt(r.get("server_cores"), ".2f"), fmt(per_cpu(r)), fmt(r.get("client_cores"), ".2f"))
        table.add_section()
    console.print(table)

    if res.get("batching_rest"):
        bt = Table(title="Adaptive batching (Trimaran --max-batch-size 32 --max-batch-latency-ms 2), 1-row bodies")
        for col in ("c", "req/s = rows/s", "p50 ms", "p99 ms", "errors", "server CPU", "req/CPU-s",
                    "without batching: req/s", "p99 ms", "req/CPU-s"):
            bt.add_column(col, justify="right")
        for c, b in res["batching_rest"].items():
            plain = next((cell["results"].get("trimaran") for cell in res["rest"]
                          if cell["rows"] == 1 and str(cell["c"]) == c), None) or {}
            bt.add_row(c, fmt(b.get("rps")), fmt(b.get("p50_ms"), ".2f"), fmt(b.get("p99_ms"), ".2f"),
                       str(b.get("errors")), fmt(b.get("server_cores"), ".2f"), fmt(per_cpu(b)),
                       fmt(plain.get("rps")), fmt(plain.get("p99_ms"), ".2f"), fmt(per_cpu(plain)))
        console.print(bt)

    if res.get("grpc"):
        gt = Table(title=f"V2 gRPC ModelInfer, 64 calls in flight (h2load -t1, connections x streams; "
                         f"{res['duration']:.0f} s; req/s from runs without h2load's per-request log, percentiles "
                         "from runs with it), beside REST c=64")
        for col in ("server", "rows", "conns x streams", "gRPC req/s", "gRPC p99 ms", "gRPC errors", "REST req/s",
                    "REST p99 ms"):
            gt.add_column(col, justify="left" if col == "server" else "right")
        for g in res["grpc"]:
            rest = next((c["results"].get(g["server"]) for c in res["rest"] if c["rows"] == g["rows"] and c["c"] == 64),
                        None) or {}
            errs = sum(g.get("errors", {}).values()) if isinstance(g.get("errors"), dict) else g.get("errors")
            gt.add_row(servers[g["server"]]["label"], str(g["rows"]), g.get("shape", "64x1"), fmt(g.get("rps")),
                       fmt(g.get("p99_ms"), ".2f"), str(errs), fmt(rest.get("rps")), fmt(rest.get("p99_ms"), ".2f"))
        console.print(gt)

    lines = []
    if res["load_before"][0] > CORES or res["load_after"][0] > CORES:
        lines.append(f"NOTE: load average {res['load_before'][0]:.1f} before, {res['load_after'][0]:.1f} after, on "
                     f"{CORES} cores: other work competed for the CPU; throughputs are then bounded by the "
                     f"scheduler's share (see server CPU), compare within a cell only")
    ceil = res["ceiling"]
    lines.append(f"in-process predict (one core, before the servers started): 1 row "
                 f"{ceil['1']['calls_per_s']:,.0f} calls/s; "
                 f"32 rows {ceil['32']['calls_per_s']:,.0f} calls/s = {ceil['32']['rows_per_s']:,.0f} rows/s")
    measured = [s for s in res["servers"] if not s.get("error")]
    ours_all = [n for n in ("trimaran", "trimaran-isvc", "trimaran-isvc-std", "trimaran-seldon")
                if any(s["name"] == n for s in measured)]
    ours = "trimaran" if "trimaran" in ours_all else None
    peer_names = [s["name"] for s in measured if s["peer"] != "trimaran"]
    for cell in res["rest"]:
        rs = cell["results"]
        valid_peers = [p for p in peer_names if p in rs and rs[p].get("errors", 1) == 0 and rs[p].get("rps")]
        if not valid_peers:
            continue
        best_rps = max(valid_peers, key=lambda p: rs[p]["rps"])
        best_p99 = min(valid_peers, key=lambda p: rs[p]["p99_ms"])
        if not any(o in rs and rs[o].get("rps") for o in ours_all):
            lines.append(f"c={cell['c']} {cell['rows']}-row: best peer {rs[best_rps]['rps']:,.0f} req/s "
                         f"({servers[best_rps]['label']}), best p99 {rs[best_p99]['p99_ms']:.2f} ms "
                         f"({servers[best_p99]['label']}); Trimaran not measured")
        for mine in ours_all:
            if mine not in rs or not rs[mine].get("rps"):
                continue
            o = rs[mine]
            who = servers[mine]["label"]
            note = "" if o.get("errors") == 0 else f" [{o.get('errors')} errors]"
            if cell["c"] == 64:
                ratio = o["rps"] / rs[best_rps]["rps"]
                lines.append(f"c=64 {cell['rows']}-row: {who} {o['rps']:,.0f} req/s vs best peer "
                             f"{rs[best_rps]['rps']:,.0f} ({servers[best_rps]['label']}) = {ratio:.2f}x "
                             f"(target >= 3x: {'met' if ratio >= 3 else 'NOT met'}){note}")
                eff = [p for p in valid_peers if per_cpu(rs[p])]
                if per_cpu(o) and eff:
                    best_eff = max(eff, key=lambda p: per_cpu(rs[p]))
                    lines.append(f"  per server CPU-second: {who} {per_cpu(o):,.0f} req vs best peer "
                                 f"{per_cpu(rs[best_eff]):,.0f} ({servers[best_eff]['label']}) = "
                                 f"{per_cpu(o) / per_cpu(rs[best_eff]):.2f}x (less sensitive to the machine's load)")
            ok = o["p99_ms"] <= rs[best_p99]["p99_ms"]
            lines.append(f"p99 c={cell['c']} {cell['rows']}-row: {who} {o['p99_ms']:.2f} ms vs best peer "
                         f"{rs[best_p99]['p99_ms']:.2f} ms ({servers[best_p99]['label']}) "
                         f"(target no worse: {'met' if ok else 'NOT met'}){note}")
    b = res.get("batching")
    if b and b.get("rps"):
        again = [r["rows_per_s"] for r in res.get("ceiling_at_batching") or []]
        one_core = statistics.median(again) if again else ceil["1"]["rows_per_s"]
        when = (f"measured right after each batching run, median of {len(again)}" if again
                else "measured before the servers started")
        ceiling_all = one_core * CORES
        ratio = b["rps"] / ceiling_all
        lines.append(f"batching c=64 1-row: Trimaran +batching {b['rps']:,.0f} rows/s vs in-process 1-row predict "
                     f"ceiling {CORES} cores x {one_core:,.0f} = {ceiling_all:,.0f} rows/s ({when}) = {ratio:.0%} "
                     f"(target >= 60%: {'met' if ratio >= 0.6 else 'NOT met'}); vs one core: "
                     f"{b['rps'] / one_core:.0%}; vs 1-row predict before the servers started "
                     f"({CORES} x {ceil['1']['rows_per_s']:,.0f}): {b['rps'] / (CORES * ceil['1']['rows_per_s']):.0%}; "
                     f"vs {CORES} x 32-row predict ({CORES} x {ceil['32']['rows_per_s']:,.0f} rows/s): "
                     f"{b['rps'] / (CORES * ceil['32']['rows_per_s']):.1%}; p99 {b['p99_ms']:.2f} ms"
                     + ("" if b.get("errors") == 0 else f" [{b.get('errors')} errors]"))
    for name, line in (res.get("under_load") or {}).items():
        lines.append(f"correctness under load, {servers[name]['label']}: {line}")
    by_cell: dict[tuple[int, str], dict[str, dict]] = {}
    for g in res.get("grpc", []):
        by_cell.setdefault((g["rows"], g.get("shape", "64x1")), {})[g["server"]] = g
    for (rows, shape), gs in by_cell.items():
        valid = [p for p in peer_names if p in gs and gs[p].get("errors") == 0 and gs[p].get("rps")]
        if ours in gs and valid:
            best = max(valid, key=lambda p: gs[p]["rps"])
            o = gs[ours]
            lines.append(f"gRPC c=64 ({shape}) {rows}-row: Trimaran {o['rps']:,.0f} req/s (p99 {o['p99_ms']:.1f} ms)"
                         f" vs best peer {gs[best]['rps']:,.0f} ({servers[best]['label']}) = "
                         f"{o['rps'] / gs[best]['rps']:.2f}x (p99 {gs[best]['p99_ms']:.1f} ms)")
        key = f"{rows}/{shape}" if f"{rows}/{shape}" in (res.get("grpc_rest_pairs") or {}) else str(rows)
        pairs = [p for p in (res.get("grpc_rest_pairs") or {}).get(key, []) if p["grpc"] and p["rest"]]
        if ours in gs and pairs:
            o = gs[ours]
            ratios = [p["grpc"] / p["rest"] for p in pairs]
            peers_p99 = ", ".join(f"{servers[p]['label']} {gs[p]['p99_ms']:.1f} ms" for p in valid)
            lines.append(f"gRPC ({shape}) vs our REST, c=64 {rows}-row, side by side: median "
                         f"{statistics.median(p['grpc'] for p in pairs):,.0f} vs "
                         f"{statistics.median(p['rest'] for p in pairs):,.0f} req/s, ratio per pair "
                         f"{' '.join(f'{r:.2f}' for r in ratios)}, median {statistics.median(ratios):.2f}x "
                         f"(target >= 1); gRPC p99 {o['p99_ms']:.1f} ms vs the peers' gRPC p99 {peers_p99 or '-'}")
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)
    return lines


def markdown(res: dict) -> str:
    """The tables again as Markdown, for bench/RESULTS.md."""
    servers = {s["name"]: s for s in res["servers"]}
    out = ["| server | rows | c | req/s | rows/s | p50 ms | p99 ms | errors | server CPU | req/CPU-s |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for cell in res["rest"]:
        for name, r in sorted(cell["results"].items(), key=lambda kv: list(servers).index(kv[0])):
            out.append(f"| {servers[name]['label']} | {cell['rows']} | {cell['c']} | {fmt(r.get('rps'))} | "
                       f"{fmt((r.get('rps') or 0) * cell['rows'])} | {fmt(r.get('p50_ms'), '.2f')} | "
                       f"{fmt(r.get('p99_ms'), '.2f')} | {r.get('errors')} | {fmt(r.get('server_cores'), '.2f')} | "
                       f"{fmt(per_cpu(r))} |")
    if res.get("batching_rest"):
        out += ["", "| Trimaran +batching, 1-row, c | req/s = rows/s | p50 ms | p99 ms | errors | server CPU | "
                "req/CPU-s | without batching: req/s | p99 ms |", "|---|---|---|---|---|---|---|---|---|"]
        for c, b in res["batching_rest"].items():
            plain = next((cell["results"].get("trimaran") for cell in res["rest"]
                          if cell["rows"] == 1 and str(cell["c"]) == c), None) or {}
            out.append(f"| {c} | {fmt(b.get('rps'))} | {fmt(b.get('p50_ms'), '.2f')} | {fmt(b.get('p99_ms'), '.2f')} | "
                       f"{b.get('errors')} | {fmt(b.get('server_cores'), '.2f')} | {fmt(per_cpu(b))} | "
                       f"{fmt(plain.get('rps'))} | {fmt(plain.get('p99_ms'), '.2f')} |")
    if res.get("grpc"):
        out += ["", "| server | rows | conns x streams | gRPC req/s (64 in flight) | gRPC p99 ms | errors | "
                    "REST req/s (c=64) | REST p99 ms |", "|---|---|---|---|---|---|---|---|"]
        for g in sorted(res["grpc"], key=lambda g: (g["rows"], g.get("shape", "64x1"),
                                                     list(servers).index(g["server"]))):
            rest = next((c["results"].get(g["server"]) for c in res["rest"] if c["rows"] == g["rows"] and c["c"] == 64),
                        None) or {}
            out.append(f"| {servers[g['server']]['label']} | {g['rows']} | {g.get('shape', '64x1')} | "
                       f"{fmt(g.get('rps'))} | {fmt(g.get('p99_ms'), '.2f')} | {g.get('errors')} | "
                       f"{fmt(rest.get('rps'))} | {fmt(rest.get('p99_ms'), '.2f')} |")
        for key, pairs in sorted((res.get("grpc_rest_pairs") or {}).items()):
            pairs = [p for p in pairs if p["grpc"] and p["rest"]]
            if pairs:
                rows, _, shape = key.partition("/")
                out.append(f"\nTrimaran gRPC ({shape or '64x1'}) ÷ REST at c=64, {rows} row(s), each pair run side "
                           "by side: " + ", ".join(f"{p['grpc']:,.0f}/{p['rest']:,.0f} = {p['grpc'] / p['rest']:.2f}×"
                                                   for p in pairs)
                           + f"; median **{statistics.median(p['grpc'] / p['rest'] for p in pairs):.2f}×**")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# main


def _grpc_round(s: Server, rows: int, streams: int, round_: int, pairs: list, bodies: dict, grpc_reqs: dict,
                duration: float) -> dict:
    """One gRPC measurement of ``s`` at 64 calls in flight, ``streams`` per connection: req/s from a run without
    h2load's per-request log, percentiles from a run with it; for Trimaran, our REST at c=64 right beside it
    (order alternating by round), so that the gRPC/REST ratio compares runs seconds apart, not minutes."""
    rest_first = s.name == "trimaran" and round_ % 2 == 1
    if rest_first:
        beside = measured(s, wrk, s.url, bodies[s.protocol, rows], 64, duration)
    target, request = f"127.0.0.1:{s.grpc_port}", str(grpc_reqs[rows])
    g = measured(s, h2load.run, target, request, 64, duration, warmup=1.0,
                 response_size=s.grpc_answer_sizes[rows], latencies=False, streams=streams)
    timed = h2load.run(target, request, 64, duration, warmup=0.5, response_size=s.grpc_answer_sizes[rows],
                       streams=streams)
    g.update({k: timed.get(k) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")})
    errors = {k: g["errors"].get(k, 0) + timed["errors"].get(k, 0) for k in {*g["errors"], *timed["errors"]}}
    g["error_codes"], g["errors"] = errors, sum(errors.values())
    if s.name == "trimaran":
        if not rest_first:
            beside = measured(s, wrk, s.url, bodies[s.protocol, rows], 64, duration)
        pairs.append({"grpc": g.get("rps"), "rest": beside.get("rps"), "grpc_server_cores": g.get("server_cores"),
                      "rest_server_cores": beside.get("server_cores")})
    return g


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per wrk run (default 4)")
    ap.add_argument("--rounds", type=int, default=3, help="repeat every cell, report the median (default 3)")
    ap.add_argument("--quick", action="store_true", help="one round of 2 s runs, no 'default' peer configurations")
    ap.add_argument("--peers", default="mlserver,kserve,bentoml,seldon",
                    help="comma list of mlserver,kserve,bentoml,seldon (or empty)")
    ap.add_argument("--no-defaults", action="store_true", help="skip the peers' default configurations")
    ap.add_argument("--no-trimaran", action="store_true", help="peers only")
    ap.add_argument("--no-grpc", action="store_true", help="skip the gRPC runs")
    ap.add_argument("--no-isvc", action="store_true",
                    help="skip the InferenceService rows, Knative and Standard mode (each a control plane of its "
                         "own, measured at status.url)")
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--rows", default="1,32")
    ap.add_argument("--workers", type=int, default=CORES, help=f"processes per server (default {CORES} = cores)")
    ap.add_argument("--skip-install", action="store_true", help="do not create or update the peers' venvs")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (server logs)")
    ap.add_argument("--json", type=Path, help="write all figures here")
    ap.add_argument("--report", type=Path, help="print the tables of an earlier --json file, run nothing")
    ap.add_argument("--markdown", action="store_true", help="also print the tables as Markdown")
    args = ap.parse_args()
    if args.report:
        res = json.loads(args.report.read_text())
        report(res)
        if args.markdown:
            print(markdown(res))
        return
    if args.quick:
        args.duration, args.rounds, args.no_defaults = min(args.duration, 2.0), 1, True
    wanted_peers = [p for p in args.peers.split(",") if p]
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    row_counts = [int(r) for r in args.rows.split(",")]

    from importlib import metadata

    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    print(f"{started}; {CORES} cores ({cpu}); load average {os.getloadavg()[0]:.2f} "
          f"{os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; python {platform.python_version()}; "
          f"scikit-learn {metadata.version('scikit-learn')}, numpy {metadata.version('numpy')}")
    res: dict = {"started": started, "cores": CORES, "cpu": cpu, "duration": args.duration, "rounds": args.rounds,
                 "load_before": os.getloadavg(), "argv": sys.argv[1:], "versions": {}}
    git = subprocess.run(["git", "log", "-1", "--format=%h %s", "--", "trimaran/serving"], cwd=REPO,
                         capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "trimaran/serving"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    res["trimaran_serving_commit"] = git + (" (+ uncommitted changes)" if dirty else "")
    print(f"trimaran/serving at {res['trimaran_serving_commit'][:100]}")
    res["versions"]["wrk"] = ensure_wrk()
    print(res["versions"]["wrk"])
    if not args.no_grpc:
        res["versions"]["h2load"] = h2load.ensure()
        print(res["versions"]["h2load"])
    for p in wanted_peers:
        peers.ensure(p, args.skip_install)
        res["versions"][p] = peers.versions(p)
        print(f"{p}: " + ", ".join(f"{k} {v}" for k, v in res["versions"][p].items()))

    tmp = Path(tempfile.mkdtemp(prefix="trimaran-bench-serving-"))
    model, X, model_path = train(tmp)
    res["ceiling"] = {str(k): v for k, v in ceiling(model, X, 2.0).items()}
    print("model: LogisticRegression on digits; in-process predict, one core: "
          + "; ".join(f"{k} row(s) {v['calls_per_s']:,.0f} calls/s ({v['rows_per_s']:,.0f} rows/s)"
                      for k, v in res["ceiling"].items()))

    bodies, grpc_reqs, expected = {}, {}, {}
    for rows in sorted(set(row_counts) | {32}):
        x = X[:rows] if rows <= len(X) else X[[i % len(X) for i in range(rows)]]
        for protocol in ("v2", "seldon", "bentoml"):
            bodies[protocol, rows] = tmp / f"body-{protocol}-{rows}.json"
            bodies[protocol, rows].write_bytes(rest_body(x, protocol))
        grpc_reqs[rows] = tmp / f"grpc-{rows}.bin"
        grpc_reqs[rows].write_bytes(grpc_request(x))
        expected[rows] = [int(v) for v in model.predict(x)]

    servers: list[Server] = []
    trimaran_available = (REPO / "trimaran" / "serving").is_dir()
    if not args.no_trimaran:
        if trimaran_available:
            servers.append(trimaran_server(model_path, tmp, "trimaran", args.workers, batch=False))
            if 1 in row_counts and 64 in concurrencies:
                servers.append(trimaran_server(model_path, tmp, "trimaran-batch", args.workers, batch=True))
            if "seldon" in wanted_peers:
                servers.append(trimaran_seldon_server(model_path, tmp, args.workers))
            if not args.no_isvc:
                servers.append(trimaran_isvc_server(model_path, tmp, args.workers))
                servers.append(trimaran_isvc_standard_server(model_path, tmp, args.workers))
        else:
            print("trimaran/serving does not exist yet: measuring the peers only")
    if "mlserver" in wanted_peers:
        servers.append(mlserver_server(model_path, tmp, "mlserver", args.workers))
        if not args.no_defaults:
            servers.append(mlserver_server(model_path, tmp, "mlserver-default", None))
    if "kserve" in wanted_peers:
        servers.append(kserve_server(model_path, tmp, "kserve", args.workers))
        if not args.no_defaults:
            servers.append(kserve_server(model_path, tmp, "kserve-default", None))
    for peer, make in (("bentoml", bentoml_server), ("seldon", seldon_server)):
        if peer in wanted_peers:
            servers.append(make(model_path, tmp, args.workers))
            if not args.no_defaults:
                servers.append(make(model_path, tmp, None))

    try:
        for s in servers:
            s.start(tmp)
        for s in servers:
            try:
                s.wait_ready(180)
                check_rest(s, bodies[s.protocol, 32].read_bytes(), expected[32])
                check_rest(s, bodies[s.protocol, 1].read_bytes(), expected[1]) if (s.protocol, 1) in bodies else None
                print(f"{s.label}: ready, REST answers match predict ({s.settings}; http {s.http_port}, "
                      f"grpc {s.grpc_port}; {len(s.pids())} processes)")
            except Exception as exc:  # noqa: BLE001 - a server that fails is reported, the others go on
                s.error = f"{type(exc).__name__}: {exc}"
                print(f"{s.label}: NOT measured: {s.error}")
        live = [s for s in servers if not s.error]
        if not args.no_grpc:
            for s in live:
                if not s.has_grpc:
                    s.grpc_error = "no V2 gRPC"
                    continue
                try:
                    for rows in sorted(set(row_counts) | {32}):
                        s.grpc_answer_sizes[rows] = check_grpc(s, grpc_reqs[rows].read_bytes(), expected[rows])
                except Exception as exc:  # noqa: BLE001
                    print(f"{s.label}: gRPC check failed, no gRPC run: {type(exc).__name__}: {str(exc)[:300]}")
                    s.grpc_error = str(exc)

        res["under_load"] = {}
        for s in live:
            res["under_load"][s.name] = check_under_load(s, model, X, bodies[s.protocol, 1 if 1 in row_counts else 32])
            print(f"{s.label}: {res['under_load'][s.name]}", flush=True)

        # warm-up: every server, every body, c=16
        for rows in row_counts:
            for s in live:
                wrk(s.url, bodies[s.protocol, rows], 16, 2)

        res["rest"], res["ceiling_at_batching"] = [], []
        batching = next((s for s in live if s.name == "trimaran-batch"), None)
        main_servers = [s for s in live if s is not batching]
        turn = 0
        for rows in row_counts:
            for c in concurrencies:
                runs: dict[str, list[dict]] = {}
                for _ in range(args.rounds):
                    order = main_servers[turn % len(main_servers):] + main_servers[:turn % len(main_servers)]
                    if batching and rows == 1:
                        order.append(batching)
                    turn += 1
                    for s in order:
                        runs.setdefault(s.name, []).append(measured(s, wrk, s.url, bodies[s.protocol, rows], c,
                                                                    args.duration))
                    if batching and rows == 1 and c == 64:
                        # the ceiling again, under the machine's load of this moment
                        res["ceiling_at_batching"].append(ceiling(model, X, 1.0, sizes=(1,))[1])
                cell = {"rows": rows, "c": c, "load": os.getloadavg()[0],
                        "results": {k: median_run(v) for k, v in runs.items()}}
                res["rest"].append(cell)
                print(f"rows {rows} c={c} (load {cell['load']:.2f}): " + "; ".join(
                    f"{k} {v['rps']:,.0f} req/s p99 {v.get('p99_ms', float('nan')):.1f} ms"
                    + (f" ERR {v['errors']}" if v.get("errors") else "") for k, v in cell["results"].items()),
                    flush=True)
        if batching:
            res["batching_rest"] = {str(c["c"]): c["results"].pop("trimaran-batch") for c in res["rest"]
                                    if "trimaran-batch" in c["results"]}
            res["batching"] = res["batching_rest"].get("64")

        res["grpc"] = []
        grpc_servers = [s for s in main_servers if not s.grpc_error]
        if not args.no_grpc and grpc_servers:
            for rows in row_counts:
                for streams in GRPC_STREAMS:
                    shape = f"{64 // streams}x{streams}"
                    runs = {}
                    pairs = res.setdefault("grpc_rest_pairs", {}).setdefault(f"{rows}/{shape}", [])
                    for round_ in range(args.rounds):
                        k = turn % len(grpc_servers)
                        turn += 1
                        for s in grpc_servers[k:] + grpc_servers[:k]:
                            g = _grpc_round(s, rows, streams, round_, pairs, bodies, grpc_reqs, args.duration)
                            runs.setdefault(s.name, []).append(g)
                    for name, rs in runs.items():
                        g = median_run(rs)
                        g.update(server=name, rows=rows, shape=shape)
                        res["grpc"].append(g)
                        print(f"gRPC rows {rows} c=64 ({shape}) {name}: {g['rps']:,.0f} req/s p99 {g['p99_ms']:.1f} ms"
                              + (f" errors {g['errors']}" if g["errors"] else ""), flush=True)
    finally:
        for s in servers:
            s.stop()
        res["servers"] = [{"name": s.name, "label": s.label, "peer": s.peer, "settings": s.settings,
                           "argv": s.argv, "error": s.error} for s in servers]
        res["load_after"] = os.getloadavg()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"logs kept in {tmp}")

    res["summary"] = report(res) if res.get("rest") else []
    if args.markdown and res.get("rest"):
        print(markdown(res))
    print(f"load average before {res['load_before'][0]:.2f}, after {res['load_after'][0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1, default=str))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
