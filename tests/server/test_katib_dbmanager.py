"""Katib's push path against our DBManager: the real SDK's report_metrics in a pod, get_trial_metrics back.

kubeflow-katib pins protobuf and grpcio versions of its own, so it runs from a separate virtualenv, found at
``$TRIMARAN_KATIB_PYTHON`` or ``.venv-katib``. ``scripts/test.sh`` (CI) builds ``.venv-katib`` and sets
``TRIMARAN_KATIB_PYTHON``, and then the SDK tests must run; a bare ``pytest`` without it skips them.
"""

from __future__ import annotations

import itertools
import json
import os
import site
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import grpc
import pytest

from tests.helpers import REPO, poll
from trimaran.runtime import LocalRuntime, ServiceAccountAccess, sandbox_available
from trimaran.server.katib import DBManager, start_dbmanager, start_dbmanager_for_home
from trimaran.server.katib.dbmanager import format_rfc3339, loopback_candidates, parse_rfc3339
from trimaran.server.katib.proto import dbmanager_pb2 as pb
from trimaran.server.katib.proto import dbmanager_pb2_grpc as pb_grpc
from trimaran.server.katib.proto import regenerate
from trimaran.server.tls import ensure_pki
from trimaran.server.tokens import TokenStore
from trimaran.store import Store, open_store


def katib_python() -> str | None:
    required = os.environ.get("TRIMARAN_KATIB_PYTHON")
    if required:
        # Named explicitly (CI): a broken environment is a failure, not a reason to skip.
        subprocess.run([required, "-c", "import kubeflow.katib"], check=True, capture_output=True)
        return required
    candidate = REPO / ".venv-katib" / "bin" / "python"
    if candidate.exists() and subprocess.run([candidate, "-c", "import kubeflow.katib"],
                                             capture_output=True).returncode == 0:
        return str(candidate)
    return None


def _trial(store: Store, namespace: str, name: str) -> dict:
    store.ensure_namespace(namespace)
    return store.create({"apiVersion": "kubeflow.org/v1beta1", "kind": "Trial",
                         "metadata": {"name": name, "namespace": namespace}, "spec": {}})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(tmp_path / "trimaran.db")
    yield opened
    opened.close()


def _start(store: Store, home: Path, host: str | None = None) -> DBManager:
    access = {"tokens": TokenStore(home), "runtime": LocalRuntime(home)}
    return start_dbmanager_for_home(store, home, **access) if host is None else \
        start_dbmanager(store, host, 6789, **access)


@pytest.fixture
def dbmanager(store: Store, tmp_path: Path) -> Iterator[DBManager]:
    handle = _start(store, tmp_path / "home")
    yield handle
    handle.stop()


@pytest.fixture
def stub(dbmanager: DBManager) -> Iterator[pb_grpc.DBManagerStub]:
    with grpc.insecure_channel(dbmanager.address) as channel:
        yield pb_grpc.DBManagerStub(channel)


@pytest.fixture
def admin(tmp_path: Path) -> list[tuple[str, str]]:
    """gRPC metadata with an admin token of the home."""
    return _bearer(TokenStore(tmp_path / "home").create("admin"))


def _bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def _report(trial: str, value: str = "1", stamp: str = "2024-05-01T12:00:00Z") -> pb.ReportObservationLogRequest:
    log = pb.MetricLog(time_stamp=stamp, metric=pb.Metric(name="loss", value=value))
    return pb.ReportObservationLogRequest(trial_name=trial, observation_log=pb.ObservationLog(metric_logs=[log]))


def _refusal(call: Callable[..., object], request: object, **kwargs: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as failed:
        call(request, **kwargs)
    return failed.value.code()


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")
def test_katib_sdk_reports_from_a_pod_and_reads_back(store: Store, dbmanager: DBManager, tmp_path: Path) -> None:
    python = katib_python()
    if python is None:
        pytest.skip("no virtualenv with kubeflow-katib (set TRIMARAN_KATIB_PYTHON or create .venv-katib)")
    trial = _trial(store, "kubeflow", "random-exp-abc123")
    home = tmp_path / "home"
    runtime = LocalRuntime(home)
    # No API server is needed: KatibClient only loads the in-cluster configuration.
    runtime.service_account = ServiceAccountAccess("127.0.0.1", 1, ensure_pki(home).ca_cert,
                                                   TokenStore(home).service_account_token)
    runtime.service_hosts.update(dbmanager.hosts)
    code = """
        import json
        from kubeflow.katib import KatibClient, report_metrics
        report_metrics({"accuracy": "0.9"})
        report_metrics({"accuracy": 0.95, "loss": 0.2})
        logs = KatibClient().get_trial_metrics("random-exp-abc123", namespace="kubeflow")
        print("read", json.dumps([[m.metric.name, m.metric.value] for m in logs]))
    """
    pod = {"metadata": {"name": "random-exp-abc123-worker", "namespace": "kubeflow", "uid": str(uuid.uuid4())},
           "spec": {"containers": [{"name": "main", "command": [python, "-c", textwrap.dedent(code)],
                                    "env": [{"name": "KATIB_TRIAL_NAME", "value": "random-exp-abc123"}]}]}}
    runtime.start_pod(pod, attempt=0)
    status = poll(lambda: (s := runtime.pod_status(pod["metadata"]["uid"]).containers["main"]).state == "terminated"
                  and s, timeout=120, what="the trial pod to finish")
    log = runtime.log_path("kubeflow", pod["metadata"]["name"]).read_text()
    assert status.exit_code == 0, log

    stored = store.list_observations("kubeflow", trials=["random-exp-abc123"])
    assert [(r["metric"], r["step"], r["value"]) for r in stored] == [
        ("accuracy", 0, 0.9), ("accuracy", 1, 0.95), ("loss", 0, 0.2)]
    assert {r["trialUid"] for r in stored} == {trial["metadata"]["uid"]}
    read_in_pod = json.loads(log.split("read ", 1)[1])
    assert sorted(read_in_pod) == [["accuracy", "0.9"], ["accuracy", "0.95"], ["loss", "0.2"]]

    # From the host, at the address the handle gives (a client configuration spares a kubeconfig).
    host_code = """
        import json, sys
        from kubernetes import client
        from kubeflow.katib import KatibClient
        katib = KatibClient(client_configuration=client.Configuration())
        logs = katib.get_trial_metrics("random-exp-abc123", namespace="kubeflow", db_manager_address=sys.argv[1])
        print(json.dumps([[m.time_stamp, m.metric.name, m.metric.value] for m in logs]))
    """
    done = subprocess.run([python, "-c", textwrap.dedent(host_code), dbmanager.address], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    assert sorted((name, value) for _, name, value in read) == [("accuracy", "0.9"), ("accuracy", "0.95"),
                                                                 ("loss", "0.2")]
    assert all(abs(parse_rfc3339(stamp) - r["timestamp"]) < 1e-3 for (stamp, _, _), r in zip(read, stored, strict=True))


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")
def test_a_control_planes_trials_push_through_katibs_sdk(plane) -> None:  # noqa: ANN001 - the conftest fixture
    # The whole path: the control plane's DBManager knows its kubelet's pods, with no token sent.
    python = katib_python()
    if python is None:
        pytest.skip("no virtualenv with kubeflow-katib (set TRIMARAN_KATIB_PYTHON or create .venv-katib)")
    code = "import sys\nfrom kubeflow.katib import report_metrics\nreport_metrics({'score': float(sys.argv[1])})"
    experiment = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "sdk-push"},
                  "spec": {
                      "objective": {"type": "maximize", "objectiveMetricName": "score"},
                      "algorithm": {"algorithmName": "random"}, "maxTrialCount": 1, "parallelTrialCount": 1,
                      "metricsCollectorSpec": {"collector": {"kind": "Push"}},
                      "parameters": [{"name": "level", "parameterType": "double",
                                      "feasibleSpace": {"min": "0.1", "max": "1.0"}}],
                      "trialTemplate": {
                          "primaryContainerName": "main",
                          "trialParameters": [{"name": "level", "reference": "level"}],
                          "trialSpec": {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {
                              "restartPolicy": "Never", "containers": [{
                                  "name": "main", "image": "x",
                                  "command": [python, "-c", code, "${trialParameters.level}"]}]}}}}}}}
    plane.cli("apply", "-f", "-", input=json.dumps(experiment))
    plane.cli("wait", "experiment/sdk-push", "--for=condition=Succeeded", "--timeout=120s")
    [trial] = json.loads(plane.cli("get", "trials", "-o", "json").stdout)["items"]
    level = float(trial["spec"]["parameterAssignments"][0]["value"])
    [score] = trial["status"]["observation"]["metrics"]
    assert float(score["latest"]) == pytest.approx(level)


def test_filters_and_order_of_get_observation_log(store: Store, stub: pb_grpc.DBManagerStub,
                                                  admin: list[tuple[str, str]]) -> None:
    _trial(store, "team-a", "t1")
    logs = [pb.MetricLog(time_stamp=stamp, metric=pb.Metric(name=name, value=value)) for stamp, name, value in [
        ("2024-05-01T12:00:02Z", "loss", "0.5"),
        ("2024-05-01T12:00:01.250000000Z", "loss", "0.7"),
        ("2024-05-01T14:00:03+02:00", "accuracy", "0.8"),
        ("", "loss", "9"),  # no time: skipped, as Katib does
    ]]
    stub.ReportObservationLog(pb.ReportObservationLogRequest(trial_name="t1",
                                                             observation_log=pb.ObservationLog(metric_logs=logs)),
                              metadata=admin)
    every = stub.GetObservationLog(pb.GetObservationLogRequest(trial_name="t1")).observation_log.metric_logs
    assert [(m.time_stamp, m.metric.name, m.metric.value) for m in every] == [
        ("2024-05-01T12:00:01.25Z", "loss", "0.7"),
        ("2024-05-01T12:00:02Z", "loss", "0.5"),
        ("2024-05-01T12:00:03Z", "accuracy", "0.8"),
    ]
    # Steps count per metric in the order reported.
    assert [(r["metric"], r["step"]) for r in store.list_observations("team-a", trials=["t1"])] == [
        ("loss", 0), ("loss", 1), ("accuracy", 0)]
    window = stub.GetObservationLog(pb.GetObservationLogRequest(
        trial_name="t1", metric_name="loss", start_time="2024-05-01T12:00:02Z", end_time="2024-05-01T12:00:03Z"))
    assert [m.metric.value for m in window.observation_log.metric_logs] == ["0.5"]
    unknown = stub.GetObservationLog(pb.GetObservationLogRequest(trial_name="nobody"))
    assert list(unknown.observation_log.metric_logs) == []

    stub.DeleteObservationLog(pb.DeleteObservationLogRequest(trial_name="t1"), metadata=admin)
    assert store.list_observations("team-a", trials=["t1"]) == []


def test_reports_that_cannot_be_stored_are_refused(store: Store, stub: pb_grpc.DBManagerStub,
                                                   admin: list[tuple[str, str]]) -> None:
    _trial(store, "team-a", "shared-name")
    _trial(store, "team-b", "shared-name")
    _trial(store, "team-a", "t1")
    done = _trial(store, "team-a", "done")
    done["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    store.update_status(done)

    def report(trial: str, value: str, stamp: str = "2024-05-01T12:00:00Z") -> grpc.StatusCode:
        return _refusal(stub.ReportObservationLog, _report(trial, value, stamp), metadata=admin)

    assert report("nobody", "1") == grpc.StatusCode.NOT_FOUND
    assert report("done", "1") == grpc.StatusCode.FAILED_PRECONDITION  # finished: its pods have ended
    assert report("shared-name", "1") == grpc.StatusCode.FAILED_PRECONDITION
    assert report("t1", "high") == grpc.StatusCode.INVALID_ARGUMENT
    assert report("t1", "nan") == grpc.StatusCode.INVALID_ARGUMENT
    assert report("t1", "1", stamp="yesterday") == grpc.StatusCode.INVALID_ARGUMENT
    assert store.list_observations("team-a") == [] and store.list_observations("team-b") == []


def test_tokens_act_within_their_namespaces_and_role(store: Store, stub: pb_grpc.DBManagerStub,
                                                     tmp_path: Path) -> None:
    tokens = TokenStore(tmp_path / "home")
    _trial(store, "team-a", "t1")
    _trial(store, "team-a", "shared-name")
    _trial(store, "team-b", "shared-name")
    edit_a, view_a, edit_b = (_bearer(tokens.create(role, [ns])) for role, ns in
                              (("edit", "team-a"), ("view", "team-a"), ("edit", "team-b")))
    sa_a = _bearer(tokens.service_account_token("team-a"))
    denied, unauthenticated = grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED
    get, delete = pb.GetObservationLogRequest(trial_name="t1"), pb.DeleteObservationLogRequest(trial_name="t1")

    assert _refusal(stub.ReportObservationLog, _report("t1"), metadata=edit_b) == denied
    assert _refusal(stub.ReportObservationLog, _report("t1"), metadata=view_a) == denied
    assert _refusal(stub.GetObservationLog, get, metadata=edit_b) == denied
    assert _refusal(stub.ReportObservationLog, _report("t1"), metadata=_bearer("tmr_x_guess")) == unauthenticated
    assert store.list_observations("team-a") == []
    stub.ReportObservationLog(_report("t1", "0.5"), metadata=sa_a)  # a pod's service-account token
    # A name in two namespaces is the one in the caller's.
    stub.ReportObservationLog(_report("shared-name", "0.25"), metadata=edit_b)
    assert [r["value"] for r in store.list_observations("team-b")] == [0.25]
    assert [m.metric.value for m in stub.GetObservationLog(get, metadata=view_a).observation_log.metric_logs] == ["0.5"]

    # Deleting takes an admin token; this process, the home's user's, may only read without one.
    assert _refusal(stub.DeleteObservationLog, delete, metadata=edit_a) == denied
    assert _refusal(stub.DeleteObservationLog, delete) == denied
    assert _refusal(stub.ReportObservationLog, _report("t1")) == denied
    assert len(stub.GetObservationLog(get).observation_log.metric_logs) == 1
    stub.DeleteObservationLog(delete, metadata=_bearer(tokens.create("admin", ["team-a"])))
    assert store.list_observations("team-a", trials=["t1"]) == []


_FROM_A_POD = """
import sys
import grpc
from trimaran.server.katib.proto import dbmanager_pb2 as pb, dbmanager_pb2_grpc as pb_grpc
stub = pb_grpc.DBManagerStub(grpc.insecure_channel(sys.argv[1]))
log = pb.ObservationLog(metric_logs=[pb.MetricLog(time_stamp="2024-05-01T12:00:00Z",
                                                  metric=pb.Metric(name="loss", value="0.5"))])
calls = {
    "report-own": lambda: stub.ReportObservationLog(pb.ReportObservationLogRequest(trial_name="mine",
                                                                                   observation_log=log)),
    "get-own": lambda: stub.GetObservationLog(pb.GetObservationLogRequest(trial_name="mine")),
    "delete-own": lambda: stub.DeleteObservationLog(pb.DeleteObservationLogRequest(trial_name="mine")),
    "report-other": lambda: stub.ReportObservationLog(pb.ReportObservationLogRequest(trial_name="theirs",
                                                                                     observation_log=log)),
    "get-other": lambda: stub.GetObservationLog(pb.GetObservationLogRequest(trial_name="theirs")),
}
for name, call in calls.items():
    try:
        call()
        print(name, "OK", flush=True)
    except grpc.RpcError as exc:
        print(name, exc.code().name, flush=True)
"""


def _answers(text: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in text.splitlines() if line.split(" ", 1)[0] in (
        "report-own", "get-own", "delete-own", "report-other", "get-other"))


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")
def test_a_pod_without_a_token_acts_for_its_own_namespace_only(store: Store, dbmanager: DBManager,
                                                               tmp_path: Path) -> None:
    _trial(store, "team-b", "mine")
    _trial(store, "team-a", "theirs")
    runtime = LocalRuntime(tmp_path / "home")
    pod = {"metadata": {"name": "prober", "namespace": "team-b", "uid": str(uuid.uuid4())},
           "spec": {"containers": [{"name": "main",
                                    "command": [sys.executable, "-c", _FROM_A_POD, dbmanager.address]}]}}
    runtime.start_pod(pod, attempt=0)
    status = poll(lambda: (s := runtime.pod_status(pod["metadata"]["uid"]).containers["main"]).state == "terminated"
                  and s, timeout=60, what="the pod to finish")
    log = runtime.log_path("team-b", "prober").read_text()
    assert status.exit_code == 0, log
    assert _answers(log) == {"report-own": "OK", "get-own": "OK", "delete-own": "PERMISSION_DENIED",
                             "report-other": "PERMISSION_DENIED", "get-other": "PERMISSION_DENIED"}, log
    assert [r["value"] for r in store.list_observations("team-b")] == [0.5]
    assert store.list_observations("team-a") == []


def _as_nobody(*args: str) -> subprocess.CompletedProcess:
    # Our interpreter may sit in root's home; the system's, of the same version, can load our packages.
    path = os.pathsep.join([*site.getsitepackages(), str(REPO)])
    for python, env in ((sys.executable, {}), (f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}",
                                               {"PYTHONPATH": path})):
        try:
            return subprocess.run([python, *args], capture_output=True, text=True, timeout=60, user=65534,
                                  group=65534, extra_groups=[], cwd="/", env={**os.environ, "HOME": "/", **env})
        except (PermissionError, FileNotFoundError):
            continue
    pytest.skip("no Python another user may run")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user")
def test_another_local_user_without_a_token_is_unauthenticated(store: Store, dbmanager: DBManager) -> None:
    _trial(store, "team-b", "mine")
    _trial(store, "team-a", "theirs")
    done = _as_nobody("-c", _FROM_A_POD, dbmanager.address)
    assert done.returncode == 0, done.stderr
    assert set(_answers(done.stdout).values()) == {"UNAUTHENTICATED"}, done.stdout


def _raw_grpc_call(method: str, message: bytes) -> bytes:
    """An HTTP/2 connection preface and one unary gRPC call, as bytes (no HPACK indexing)."""
    def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
        return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload

    headers = b"".join(b"\x00" + bytes([len(k)]) + k + bytes([len(v)]) + v for k, v in [
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", method.encode()), (b":authority", b"x"),
        (b"content-type", b"application/grpc"), (b"te", b"trailers")])
    body = b"\x00" + len(message).to_bytes(4, "big") + message
    return (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"") + frame(1, 4, 1, headers)
            + frame(0, 1, 1, body))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a socket to another user's process")
def test_a_connection_held_by_another_caller_too_is_refused(store: Store, dbmanager: DBManager,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    # A socket handed to (or inherited by) a process of someone else must not pass for either.
    _trial(store, "team-a", "t1")
    host, port = dbmanager.address.rsplit(":", 1)
    call = _raw_grpc_call("/api.v1.beta1.DBManager/GetObservationLog",
                          pb.GetObservationLogRequest(trial_name="t1").SerializeToString())
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        holder = subprocess.Popen(["sleep", "60"], pass_fds=[conn.fileno()], user=65534, group=65534,
                                  extra_groups=[])
        try:
            conn.sendall(call)
            assert not _answer_has_data(conn.makefile("rb"))
            assert "held by processes of different callers" in caplog.text
        finally:
            holder.kill()
            holder.wait()
    assert "refused a call" in caplog.text
    with socket.create_connection((host, int(port)), timeout=10) as conn:  # the same call, unshared, is answered
        conn.sendall(call)
        assert _answer_has_data(conn.makefile("rb"))
    assert caplog.text.count("refused a call") == 1


def _answer_has_data(stream: BinaryIO) -> bool:
    """Whether stream 1's answer carries a message (a refusal has trailers only)."""
    while True:
        head = stream.read(9)
        length, kind, flags, sid = int.from_bytes(head[:3], "big"), head[3], head[4], int.from_bytes(head[5:], "big")
        stream.read(length)
        if sid == 1 and kind == 0:
            return True
        if sid == 1 and kind == 1 and flags & 1:
            return False


def test_each_home_has_its_own_stable_address(store: Store, tmp_path: Path) -> None:
    home = tmp_path / "home"
    first, second = itertools.islice(loopback_candidates(home), 2)
    assert first != second and first.startswith("127.") and not first.startswith("127.0.")
    assert next(loopback_candidates(tmp_path / "other")) != first
    # The address the home had is taken (another home, or anything else): the next one serves.
    with socket.socket() as squatter:
        squatter.bind((first, 6789))
        squatter.listen()
        handle = _start(store, home)
        try:
            assert handle.address == f"{second}:6789"
            assert handle.hosts["katib-db-manager.kubeflow"] == second
            with pytest.raises(OSError):
                _start(store, home, host=second)
        finally:
            handle.stop()
    again = _start(store, home)
    try:
        assert again.address == f"{first}:6789"
    finally:
        again.stop()


def test_rfc3339_round_trip() -> None:
    assert parse_rfc3339("1970-01-01T00:00:01.5Z") == 1.5
    assert parse_rfc3339("1970-01-01T01:00:00+01:00") == 0.0
    assert format_rfc3339(1.5) == "1970-01-01T00:00:01.5Z"
    assert format_rfc3339(parse_rfc3339("2024-05-01T12:00:00Z")) == "2024-05-01T12:00:00Z"


# In its own interpreter: protoc's extension can crash a process that has loaded other protobuf users.
_GENERATE = """
import json, sys
from pathlib import Path
from trimaran.server.katib.proto import regenerate
print(json.dumps(regenerate.generate(Path(sys.argv[1]))))
"""


def test_generated_modules_are_current(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", _GENERATE, str(tmp_path)], capture_output=True, text=True,
                         check=True, cwd=REPO)
    generated = json.loads(out.stdout)
    assert set(generated) == set(regenerate.GENERATED)
    for name, text in generated.items():
        assert (regenerate.HERE / name).read_text() == text, \
            f"{name} is stale: run python -m trimaran.server.katib.proto.regenerate"
