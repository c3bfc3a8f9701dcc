"""The graph executor over real HTTP: Seldon's payload types on a prepackaged SKLEARN_SERVER, and a ROUTER +
COMBINER graph of user classes whose per-child answers are checked, with request-time errors in Seldon's shape."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.serving.conftest import free_port
from tests.serving.seldon.conftest import Executor

ROWS = [[0.1, 0.0, 0.2, 0.1], [5.1, 4.9, 5.0, 5.2]]


@pytest.fixture(scope="module")
def sklearn_server(start_executor: Callable[[dict], Executor], iris_model: Path) -> Executor:
    graph = {"name": "iris", "type": "MODEL", "implementation": "SKLEARN_SERVER", "modelUri": "pvc://models/iris"}
    return start_executor({"name": "iris", "predictor": "default", "graph": graph,
                           "sources": {"iris": {"modelDir": str(iris_model)}}}).wait_ready()


@pytest.fixture(scope="module")
def graph_server(start_executor: Callable[[dict], Executor], components_dir: Path) -> Executor:
    """router (child = first value) → [avg: AVERAGE_COMBINER over double (x2) and quad (x4), echo]."""
    graph = {"name": "router", "type": "ROUTER", "children": [
        {"name": "avg", "type": "COMBINER", "implementation": "AVERAGE_COMBINER", "children": [
            {"name": "double", "type": "MODEL", "parameters": [{"name": "factor", "type": "INT", "value": "2"}]},
            {"name": "quad", "type": "MODEL", "parameters": [{"name": "factor", "type": "INT", "value": "4"},
                                                             {"name": "drop_last", "type": "BOOL", "value": "true"}]},
        ]},
        {"name": "echo", "type": "MODEL", "parameters": [{"name": "suffix", "type": "STRING", "value": "?"}]},
    ]}
    paths = [str(components_dir)]
    sources = {"router": {"class": "components.ByFirstValue", "paths": paths},
               "double": {"class": "components.Scale", "paths": paths},
               "quad": {"class": "components.Scale", "paths": paths},
               "echo": {"class": "components.Echo", "paths": paths}}
    return start_executor({"name": "graph", "predictor": "main", "graph": graph, "sources": sources}).wait_ready()


def test_sklearn_server_ndarray_and_tensor(sklearn_server: Executor) -> None:
    answer = sklearn_server.predict({"data": {"names": ["a", "b", "c", "d"], "ndarray": ROWS},
                                     "meta": {"puid": "p-1", "tags": {"from": "test"}}})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    probabilities = body["data"]["ndarray"]
    assert [max(range(3), key=row.__getitem__) for row in probabilities] == [0, 1]
    assert body["data"]["names"] == ["t:0", "t:1", "t:2"]
    assert body["meta"]["puid"] == "p-1" and body["meta"]["tags"] == {"from": "test"}
    assert body["meta"]["requestPath"] == {"iris": "SKLEARN_SERVER"}
    flat = [v for row in ROWS for v in row]
    tensor = sklearn_server.predict({"data": {"tensor": {"shape": [2, 4], "values": flat}}}).json()
    assert tensor["data"]["tensor"]["shape"] == [2, 3]
    assert tensor["data"]["tensor"]["values"] == pytest.approx([v for row in probabilities for v in row])
    predict = sklearn_server.predict({"data": {"ndarray": ROWS}}, "/seldon/ns/iris/api/v1.0/predictions")
    assert predict.status_code == 200 and len(predict.json()["data"]["ndarray"]) == 2
    form = sklearn_server.client.post("/api/v1.0/predictions", data={"json": json.dumps({"data": {"ndarray": ROWS}})})
    assert form.status_code == 200 and form.json()["data"]["ndarray"] == probabilities


def test_sklearn_server_bad_payloads_answer_in_seldon_shape(sklearn_server: Executor) -> None:
    answer = sklearn_server.predict({"strData": "hello"})
    assert answer.status_code == 400
    status = answer.json()["status"]
    assert status["status"] == "FAILURE" and status["reason"] == "MICROSERVICE_BAD_DATA"
    assert "unit 'iris'" in status["info"] and "strData" in status["info"]
    both = sklearn_server.predict({"data": {"ndarray": ROWS}, "strData": "x"}).json()["status"]
    assert "exactly one of" in both["info"]
    ragged = sklearn_server.predict({"data": {"tensor": {"shape": [3, 4], "values": [1.0, 2.0]}}}).json()
    assert ragged["status"]["code"] == 400 and "data.tensor" in ragged["status"]["info"]
    narrow = sklearn_server.predict({"data": {"ndarray": [[1.0, 2.0]]}})
    assert narrow.status_code == 400 and "unit 'iris' (MODEL)" in narrow.json()["status"]["info"]
    text = sklearn_server.predict({"data": {"ndarray": [["a", "b", "c", "d"]]}})
    assert text.status_code in (400, 500) and "unit 'iris' (MODEL)" in text.json()["status"]["info"], text.text
    metadata = sklearn_server.client.get("/api/v1.0/metadata").json()
    assert metadata["name"] == "default" and metadata["models"]["iris"]["platform"] == "sklearn"


def test_router_combiner_graph_per_child_answers(graph_server: Executor) -> None:
    # route 0 → avg: mean of double (x2) and quad (x4) = x3
    answer = graph_server.predict({"data": {"ndarray": [[0, 1], [2, 3]]}})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["data"]["ndarray"] == [[0, 3], [6, 9]]
    assert body["meta"]["routing"] == {"router": 0}
    assert set(body["meta"]["requestPath"]) == {"router", "avg", "double", "quad"}
    assert body["meta"]["tags"]["scaled_by"] in (2, 4)
    # route 1 → echo, in every payload type
    assert graph_server.predict({"data": {"ndarray": [[1, 5]]}}).json()["data"]["ndarray"] == [[1, 5]]
    text = graph_server.predict({"strData": "hi"}).json()
    assert text["strData"] == "HI?" and text["meta"]["routing"] == {"router": 1}
    binary = graph_server.predict({"binData": base64.b64encode(b"abc").decode()}).json()
    assert base64.b64decode(binary["binData"]) == b"cba"
    assert graph_server.predict({"jsonData": {"k": [1]}}).json()["jsonData"] == {"got": {"k": [1]}, "suffix": "?"}
    feedback = graph_server.client.post("/api/v1.0/feedback", json={
        "request": {"strData": "hi"}, "response": text, "reward": 1.0})
    assert feedback.status_code == 200 and set(feedback.json()["meta"]["requestPath"]) == {"router", "echo"}
    combined = graph_server.client.post("/api/v1.0/feedback", json={
        "request": {"data": {"ndarray": [[0, 1]]}}, "response": body, "reward": 0.5}).json()
    assert set(combined["meta"]["requestPath"]) == {"router", "avg", "double", "quad"}
    echo_meta = graph_server.client.get("/api/v1.0/metadata/echo").json()
    assert echo_meta["custom"] == {"author": "tests"}


def test_raw_predict_sees_the_whole_message(start_executor: Callable[[dict], Executor], components_dir: Path) -> None:
    server = start_executor({"graph": {"name": "raw", "type": "MODEL"},
                             "sources": {"raw": {"class": "components.Raw", "paths": [str(components_dir)]}}})
    answer = server.wait_ready().predict({"data": {"ndarray": [[1]]}, "meta": {"puid": "x-1"}}).json()
    assert answer["jsonData"] == {"keys": ["data", "meta"], "puid": "x-1"}
    assert answer["meta"]["puid"] == "x-1"


def test_router_index_out_of_range_and_combiner_shape_mismatch_name_the_unit(graph_server: Executor) -> None:
    routed = graph_server.predict({"data": {"ndarray": [[7, 0]]}})
    assert routed.status_code == 400
    assert "unit 'router' (ROUTER): route chose child 7, but the unit has 2" in routed.json()["status"]["info"]
    mismatch = graph_server.predict({"data": {"ndarray": [[0, 1, 2]]}})
    assert mismatch.status_code == 400
    info = mismatch.json()["status"]["info"]
    assert "unit 'avg' (COMBINER)" in info and "double: [1, 3], quad: [1, 2]" in info


def test_remote_model_uri_is_fetched_into_the_cache(iris_model: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from trimaran.serving.seldon.server import build_graph

    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(iris_model))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("TRIMARAN_STORAGE_CACHE", str(tmp_path / "cache"))
    try:
        uri = f"http://127.0.0.1:{server.server_address[1]}/model.joblib"
        graph = build_graph({"graph": {"name": "iris", "type": "MODEL", "implementation": "SKLEARN_SERVER",
                                       "modelUri": uri}, "sources": {"iris": {"modelUri": uri}}})
    finally:
        server.shutdown()
        server.server_close()
    answer = graph.predict({"data": {"ndarray": ROWS}})
    assert [max(range(3), key=row.__getitem__) for row in answer["data"]["ndarray"]] == [0, 1]
    assert list((tmp_path / "cache").iterdir())


def test_units_at_an_endpoint_are_called_over_seldons_internal_api() -> None:
    """A ROUTER and a MODEL served by a Seldon microservice elsewhere (a stub of its internal API here)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from trimaran.serving.seldon.protocol import SeldonError
    from trimaran.serving.seldon.server import build_graph

    calls: list[str] = []

    class Microservice(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            calls.append(self.path)
            if self.path == "/route":
                answer = {"data": {"ndarray": [[int(body["data"]["ndarray"][0][0])]]}}
            elif self.path == "/predict":
                answer = {"data": {"names": ["tripled"], "ndarray": [[3 * v for v in row]
                                                                       for row in body["data"]["ndarray"]]}}
            else:
                answer = {}
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Microservice)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    endpoint = {"service_host": "127.0.0.1", "service_port": server.server_address[1], "type": "REST"}
    graph = build_graph({"graph": {"name": "split", "type": "ROUTER", "endpoint": endpoint, "children": [
        {"name": "simple", "type": "MODEL", "implementation": "SIMPLE_MODEL"},
        {"name": "triple", "type": "MODEL", "endpoint": endpoint}]},
        "sources": {"split": {"url": url}, "triple": {"url": url}}})
    try:
        remote = graph.predict({"data": {"ndarray": [[1, 2]]}})
        assert remote["data"] == {"names": ["tripled"], "ndarray": [[3, 6]]}
        assert remote["meta"]["routing"] == {"split": 1} and calls == ["/route", "/predict"]
        assert graph.predict({"data": {"ndarray": [[0, 2]]}})["data"]["names"] == ["class0", "class1", "class2"]
    finally:
        server.shutdown()
        server.server_close()
    closed = f"http://127.0.0.1:{free_port()}"
    gone = build_graph({"graph": {"name": "triple", "type": "MODEL", "endpoint": endpoint},
                        "sources": {"triple": {"url": closed}}})
    with pytest.raises(SeldonError, match="unit 'triple' \\(MODEL\\): cannot reach") as down:
        gone.predict({"data": {"ndarray": [[1, 2]]}})
    assert down.value.http_status == 502
