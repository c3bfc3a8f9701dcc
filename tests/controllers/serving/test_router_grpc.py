"""V2 gRPC through the router against real model-server processes: the traffic split, the activator's hold,
retries when a replica is killed, the revision trailer, the replica's own errors, and the shared stats."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from tests.controllers.serving.test_router import Replica, RouterHarness, _free_port
from tests.helpers import poll
from trimaran.serving.proto import grpc_predict_v2_pb2 as pb
from trimaran.serving.proto import grpc_predict_v2_pb2_grpc as pb_grpc


class ModelServer:
    """``python -m trimaran.serving`` on a constant model (it answers ``answer``), in its own process group
    so that it can be killed outright, workers included."""

    def __init__(self, directory: Path, answer: int) -> None:
        import joblib
        from sklearn.dummy import DummyClassifier

        directory.mkdir(parents=True)
        model = DummyClassifier(strategy="constant", constant=answer).fit([[0, 0], [1, 1]], [answer, 1 - answer])
        joblib.dump(model, directory / "model.joblib")
        http_port, grpc_port = _free_port(), _free_port()
        self.address, self.grpc_address = f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trimaran.serving", "--model-name", "iris", "--model-dir", str(directory),
             "--model-format", "sklearn", "--host", "127.0.0.1", "--http-port", str(http_port),
             "--grpc-port", str(grpc_port), "--workers", "1"],
            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ready(self) -> bool:
        try:
            with grpc.insecure_channel(self.grpc_address) as channel:
                return pb_grpc.GRPCInferenceServiceStub(channel).ServerReady(
                    pb.ServerReadyRequest(), timeout=1).ready
        except grpc.RpcError:
            return False

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ModelServer]]:
    root = tmp_path_factory.mktemp("models")
    started = {"zero": ModelServer(root / "zero", 0), "one": ModelServer(root / "one", 1),
               "victim": ModelServer(root / "victim", 0)}
    try:
        poll(lambda: all(s.ready() for s in started.values()), timeout=60, interval=0.2, what="model servers ready")
        yield started
    finally:
        for server in started.values():
            server.kill()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[RouterHarness]:
    h = RouterHarness(tmp_path)
    yield h
    h.close()


class Client:
    """Our own V2 stub on the router's gRPC port; one channel for every thread."""

    def __init__(self, port: int) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)

    def infer(self, timeout: float = 30) -> tuple[int, str]:
        """The model's answer and the revision that served it (the router's trailer)."""
        request = pb.ModelInferRequest(model_name="iris", inputs=[pb.ModelInferRequest.InferInputTensor(
            name="input-0", datatype="FP32", shape=[1, 2], contents=pb.InferTensorContents(fp32_contents=[0.5, 0.5]))])
        response, call = self.stub.ModelInfer.with_call(request, timeout=timeout)
        revision = dict(call.trailing_metadata())["x-trimaran-revision"]
        return int(response.outputs[0].contents.int64_contents[0]), revision


def _wait_ready(harness: RouterHarness, revision: str, count: int = 1) -> None:
    poll(lambda: len(harness.ready_endpoints(revision)) >= count, timeout=10, what=f"{revision} ready")


def test_grpc_follows_the_traffic_split_and_is_counted(harness: RouterHarness, servers: dict) -> None:
    zero, one = servers["zero"], servers["one"]
    harness.configure([("rev-1", 80), ("rev-2", 20)], {"rev-1": [zero.address], "rev-2": [one.address]},
                      grpc_endpoints={s.address: s.grpc_address for s in (zero, one)})
    _wait_ready(harness, "rev-1")
    _wait_ready(harness, "rev-2")
    client = Client(harness.grpc_port)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: client.infer(), range(400)))
    assert set(results) == {(0, "rev-1"), (1, "rev-2")}
    # Binomial(400, 0.2): mean 80, sd 8; 5 sd either side.
    assert 40 <= Counter(results)[(1, "rev-2")] <= 120, Counter(results)
    counted = poll(lambda: (lambda s: s if sum(b[2] for r in s.values() for b in r["buckets"]) >= 400 else None)(
        harness.stats()["revisions"]), timeout=5, what="the calls in the per-second buckets")
    assert sum(b[2] for b in counted["rev-2"]["buckets"]) == Counter(results)[(1, "rev-2")]


def test_grpc_call_is_held_until_a_replica_is_ready(harness: RouterHarness, servers: dict) -> None:
    one = servers["one"]
    harness.configure([("rev-1", 100)], {"rev-1": []}, grpc_endpoints={})
    poll(lambda: "rev-1" in harness.stats()["revisions"], what="config loaded")
    client = Client(harness.grpc_port)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(client.infer)
        poll(lambda: harness.stats()["revisions"]["rev-1"]["inflight"] == 1, what="the call held")
        assert not pending.done()
        harness.configure([("rev-1", 100)], {"rev-1": [one.address]}, grpc_endpoints={one.address: one.grpc_address})
        assert pending.result(timeout=10) == (1, "rev-1")


def test_held_grpc_call_times_out_unavailable_and_replica_errors_pass_through(harness: RouterHarness,
                                                                               servers: dict) -> None:
    harness.configure([("rev-1", 100)], {"rev-1": []}, activation_timeout=0.5, grpc_endpoints={})
    poll(lambda: "rev-1" in harness.stats()["revisions"], what="config loaded")
    client = Client(harness.grpc_port)
    with pytest.raises(grpc.RpcError) as held:
        client.infer()
    assert held.value.code() == grpc.StatusCode.UNAVAILABLE and "no ready replica" in held.value.details()

    zero = servers["zero"]
    harness.configure([("rev-1", 100)], {"rev-1": [zero.address]}, grpc_endpoints={zero.address: zero.grpc_address})
    _wait_ready(harness, "rev-1")
    with pytest.raises(grpc.RpcError) as missing:  # the replica's NOT_FOUND, not retried, not rewritten
        client.stub.ModelMetadata(pb.ModelMetadataRequest(name="nope"), timeout=5)
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    metadata = client.stub.ModelMetadata(pb.ModelMetadataRequest(name="iris"), timeout=5)
    assert metadata.name == "iris"


def test_a_killed_replica_fails_no_grpc_call(harness: RouterHarness, servers: dict) -> None:
    zero, victim = servers["zero"], servers["victim"]
    harness.configure([("rev-1", 100)], {"rev-1": [zero.address, victim.address]},
                      grpc_endpoints={s.address: s.grpc_address for s in (zero, victim)})
    _wait_ready(harness, "rev-1", 2)
    client = Client(harness.grpc_port)
    stop = threading.Event()
    results: list[tuple[int, str]] = []
    errors: list[Exception] = []

    def load() -> None:
        while not stop.is_set():
            try:
                results.append(client.infer())
            except grpc.RpcError as exc:
                errors.append(exc)

    with ThreadPoolExecutor(4) as pool:
        for _ in range(4):
            pool.submit(load)
        poll(lambda: len(results) > 50, what="calls on both replicas")
        victim.kill()
        done = len(results)
        poll(lambda: len(results) > done + 200, timeout=10, what="calls after the kill")
        stop.set()
    assert not errors, errors[:3]
    poll(lambda: harness.stats()["revisions"]["rev-1"]["notReady"] == [victim.address], what="the victim not ready")


def test_grpc_port_taken_is_reported(harness: RouterHarness, servers: dict) -> None:
    squatter = grpc.server(ThreadPoolExecutor(1), options=[("grpc.so_reuseport", 0)])
    squatter.add_insecure_port(f"127.0.0.1:{harness.grpc_port}")
    squatter.start()
    try:
        zero = servers["zero"]
        harness.configure([("rev-1", 100)], {"rev-1": [zero.address]}, grpc_endpoints={})
        errors = poll(lambda: harness.stats().get("grpcBindErrors"), what="the gRPC bind error")
        assert list(errors) == ["default/iris"] and str(harness.grpc_port) in errors["default/iris"]
        assert harness.stats()["bindErrors"] == {}
    finally:
        squatter.stop(0)


class FakeBackend:
    """A gRPC replica that answers ModelInfer with ``behaviour`` (a sync grpc server, so not on the router's
    loop), behind a stub HTTP replica that answers the router's readiness probe for it."""

    def __init__(self, behaviour: Callable[[bytes, grpc.ServicerContext], bytes]) -> None:
        self.server = grpc.server(ThreadPoolExecutor(2))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "inference.GRPCInferenceService", {"ModelInfer": grpc.unary_unary_rpc_method_handler(behaviour)}),))
        self.grpc_address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()
        self.probed = Replica("probe-only")
        self.address = self.probed.address

    def stop(self) -> None:
        self.server.stop(0)
        self.probed.stop()


def test_a_replicas_own_unavailable_is_answered_not_retried(harness: RouterHarness) -> None:
    """An overloaded replica's UNAVAILABLE (its connection is fine) goes back to the caller as it is."""
    calls: list[bytes] = []

    def overloaded(request: bytes, context: grpc.ServicerContext) -> bytes:
        calls.append(request)
        context.abort(grpc.StatusCode.UNAVAILABLE, "queue full, retry later")

    backend = FakeBackend(overloaded)
    try:
        harness.configure([("rev-1", 100)], {"rev-1": [backend.address]},
                          grpc_endpoints={backend.address: backend.grpc_address})
        _wait_ready(harness, "rev-1")
        with pytest.raises(grpc.RpcError) as answer:
            Client(harness.grpc_port).infer()
        assert (answer.value.code(), answer.value.details()) == (grpc.StatusCode.UNAVAILABLE, "queue full, retry later")
        assert len(calls) == 1 and harness.ready_endpoints("rev-1") == [backend.address]
    finally:
        backend.stop()


def test_bytes_metadata_and_deadline_reach_the_replica_unchanged(harness: RouterHarness) -> None:
    seen: list[tuple[bytes, dict, float | None]] = []

    def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
        seen.append((request, dict(context.invocation_metadata()), context.time_remaining()))
        return request[::-1]

    backend = FakeBackend(echo)
    try:
        harness.configure([("rev-1", 100)], {"rev-1": [backend.address]},
                          grpc_endpoints={backend.address: backend.grpc_address})
        _wait_ready(harness, "rev-1")
        with grpc.insecure_channel(f"127.0.0.1:{harness.grpc_port}") as channel:
            raw = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
            payload = bytes(range(256)) * 4  # not a valid message: nothing on the way parses it
            assert raw(payload, timeout=2, metadata=(("x-user", "ada"), ("x-trace-bin", b"\x00\x01"))) == payload[::-1]
        request, metadata, remaining = seen[0]
        assert request == payload
        assert metadata["x-user"] == "ada" and metadata["x-trace-bin"] == b"\x00\x01"
        assert remaining is not None and remaining < 2.5  # the caller's, not the service's 30 s (gRPC rounds up)
    finally:
        backend.stop()
