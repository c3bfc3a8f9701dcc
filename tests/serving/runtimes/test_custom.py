"""Custom Python models (model.py in KServe's shape) and transformers that forward to a real predictor."""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from trimaran.serving.runtimes import ModelLoadError, PredictorError, detect_format, load_model


def write(directory: Path, source: str) -> Path:
    (directory / "model.py").write_text(textwrap.dedent(source))
    return directory


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, LogisticRegression]:
    x, y = load_digits(return_X_y=True)
    return x, LogisticRegression(max_iter=300).fit(x[:600] / 16, y[:600])


def test_kserve_shaped_class_loads_its_own_files(tmp_path: Path, digits: tuple) -> None:
    x, clf = digits
    joblib.dump(clf, tmp_path / "model.joblib")
    write(tmp_path, """
        import pathlib
        import joblib
        import numpy as np

        class DigitsModel:
            def __init__(self, name):
                self.name = name
                self.ready = False

            def load(self):
                self.clf = joblib.load(pathlib.Path(__file__).parent / "model.joblib")
                self.ready = True
                return self.ready

            def preprocess(self, payload, headers=None):
                return np.asarray(payload["instances"]) / 16

            def predict(self, payload, headers=None):
                return self.clf.predict(payload)

            def postprocess(self, result, headers=None):
                return {"predictions": result.tolist(), "seen": headers.get("x-seen")}
    """)
    assert detect_format(tmp_path) == "custom"  # model.py wins over the model.joblib it loads
    model = load_model(tmp_path, name="digits", version="4")
    assert (model.platform, model.version, model.payload_level, model.batchable) == ("custom", "4", True, False)
    assert model.inputs == [] and model.outputs == []

    answer = asyncio.run(model.infer_payload({"instances": x[:10].tolist()}, {"x-seen": "yes"}))
    assert answer == {"predictions": clf.predict(x[:10] / 16).tolist(), "seen": "yes"}
    with pytest.raises(NotImplementedError, match="payload level"):
        model.predict({"input-0": x[:1]})


def test_async_methods_without_headers_and_model_class(tmp_path: Path) -> None:
    write(tmp_path, """
        import asyncio

        class Helper:
            def predict(self, payload):
                raise AssertionError("not the model")

        class Echo:
            def __init__(self, name):
                self.name = name

            async def load(self):
                await asyncio.sleep(0)
                self.prefix = "echo"

            inflight = 0
            most_inflight = 0

            async def predict(self, payload):
                Echo.inflight += 1
                Echo.most_inflight = max(Echo.most_inflight, Echo.inflight)
                await asyncio.sleep(0.05)
                Echo.inflight -= 1
                return {"name": self.name, "said": f"{self.prefix}: {payload['text']}"}

        MODEL_CLASS = Echo
    """)
    model = load_model(tmp_path / "model.py", name="echo")

    async def many() -> list:
        return await asyncio.gather(*(model.infer_payload({"text": str(i)}, {}) for i in range(8)))

    loop = asyncio.new_event_loop()
    answers = loop.run_until_complete(many())
    loop.close()
    assert answers[3] == {"name": "echo", "said": "echo: 3"}
    assert type(model.obj).most_inflight == 8  # async predicts overlap on the loop


def test_sync_methods_run_one_at_a_time_off_the_loop(tmp_path: Path) -> None:
    write(tmp_path, """
        import threading
        import time

        class Counter:
            def __init__(self, name):
                self.active = 0
                self.most = 0
                self.calls = 0
                self.threads = set()

            def predict(self, payload, headers):
                self.calls += 1
                self.active += 1
                self.most = max(self.most, self.active)
                self.threads.add(threading.get_ident())
                time.sleep(0.02)
                self.active -= 1
                return payload
    """)
    model = load_model(tmp_path, name="counter")

    async def many() -> None:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        task = asyncio.create_task(ticker())
        await asyncio.gather(*(model.infer_payload(i, {}) for i in range(10)))
        task.cancel()
        assert ticks >= 10  # the loop kept running while predict slept
        assert threading.get_ident() not in model.obj.threads

    asyncio.run(many())
    assert model.obj.most == 1

    # Two event loops at once (as HTTP and gRPC servers might run): still one call at a time, no loop errors.
    async def some() -> None:
        await asyncio.gather(*(model.infer_payload(i, {}) for i in range(5)))

    errors: list[BaseException] = []

    def run_loop() -> None:
        try:
            asyncio.run(some())
        except BaseException as e:  # reported below: an exception in a thread would not fail the test
            errors.append(e)

    threads = [threading.Thread(target=run_loop) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert (model.obj.calls, model.obj.most) == (20, 1)


@pytest.mark.parametrize(("source", "message"), [
    ("x = 1\n", "defines no class with a predict"),
    ("class A:\n    def predict(self, p): ...\nclass B:\n    def predict(self, p): ...\n",
     r"several classes with predict\(\) \(A, B\); set MODEL_CLASS"),
    ("import no_such_module_anywhere\n",
     r"(?s)importing .*model\.py failed:\n.*line 1.*No module named 'no_such_module_anywhere'"),
    ("class A:\n    def __init__(self, name):\n        raise RuntimeError('weights missing')\n"
     "    def predict(self, p): ...\n",
     r"(?s)A\('m'\) failed:\n  File .*model\.py\", line 3, in __init__.*RuntimeError: weights missing"),
    ("class A:\n    def __init__(self, name): ...\n    def load(self):\n        return False\n"
     "    def predict(self, p): ...\n", r"A\.load\(\) returned False"),
    ("class A:\n    def __init__(self, name): ...\n    def load(self):\n        open('/nonexistent/weights')\n"
     "    def predict(self, p): ...\n", r"(?s)A\.load\(\) failed:.*FileNotFoundError"),
    ("MODEL_CLASS = 'A'\n", "MODEL_CLASS must be a class"),
])
def test_custom_model_errors(tmp_path: Path, source: str, message: str) -> None:
    (tmp_path / "model.py").write_text(source)
    with pytest.raises(ModelLoadError, match=message):
        load_model(tmp_path, name="m")


class Predictor(ThreadingHTTPServer):
    """A predictor speaking V1 and V2 for one real scikit-learn model, recording the headers it was sent."""

    daemon_threads = True

    def __init__(self, clf: LogisticRegression) -> None:
        self.clf = clf
        self.seen_headers: list[dict[str, str]] = []
        super().__init__(("127.0.0.1", 0), _PredictorHandler)


class _PredictorHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Predictor

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen_headers.append(dict(self.headers))
        if self.path == "/v1/models/digits:predict":
            status, answer = 200, {"predictions": self.server.clf.predict(np.asarray(body["instances"])).tolist()}
        elif self.path == "/v2/models/digits/infer":
            tensor = body["inputs"][0]
            x = np.asarray(tensor["data"], dtype=np.float64).reshape(tensor["shape"])
            labels = self.server.clf.predict(x)
            answer = {"model_name": "digits", "outputs": [
                {"name": "output-0", "datatype": "INT64", "shape": [len(labels)], "data": labels.tolist()}]}
            status = 200
        else:
            status, answer = 404, {"error": f"no model at {self.path}"}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def predictor(digits: tuple) -> Iterator[Predictor]:
    server = Predictor(digits[1])
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


TRANSFORMER = """
    import numpy as np
    from trimaran.serving.runtimes import TransformerModel

    class Scale(TransformerModel):
        def preprocess(self, payload, headers=None):
            pixels = np.asarray(payload["images"], dtype=np.float64) / 16
            if self.protocol == "v2":
                return {"inputs": [{"name": "input-0", "datatype": "FP64", "shape": list(pixels.shape),
                                    "data": pixels.ravel()}]}
            return {"instances": pixels}

        def postprocess(self, result, headers=None):
            labels = result["predictions"] if self.protocol == "v1" else result["outputs"][0]["data"]
            return {"digits": [str(v) for v in labels]}
"""


@pytest.mark.parametrize("protocol", ["v1", "v2"])
def test_transformer_forwards_to_the_predictor(tmp_path: Path, digits: tuple, predictor: Predictor,
                                               protocol: str) -> None:
    x, clf = digits
    write(tmp_path, TRANSFORMER)
    host = f"127.0.0.1:{predictor.server_address[1]}"
    model = load_model(tmp_path, name="digits", predictor_host=host, predictor_protocol=protocol)

    async def twice() -> list:
        return [await model.infer_payload({"images": x[:12].tolist()}, {"X-Request-Id": "r1", "Cookie": "c"}),
                await model.infer_payload({"images": x[12:20].tolist()}, {})]

    first, second = asyncio.run(twice())
    assert first == {"digits": [str(v) for v in clf.predict(x[:12] / 16)]}
    assert second == {"digits": [str(v) for v in clf.predict(x[12:20] / 16)]}
    assert predictor.seen_headers[0].get("X-Request-Id") == "r1"  # tracing headers pass, others do not
    assert "Cookie" not in predictor.seen_headers[0]


def test_transformer_reports_predictor_errors(tmp_path: Path, predictor: Predictor) -> None:
    write(tmp_path, TRANSFORMER)
    host = f"127.0.0.1:{predictor.server_address[1]}"
    wrong_name = load_model(tmp_path, name="cifar", predictor_host=host)
    with pytest.raises(PredictorError, match="answered 404: no model at /v1/models/cifar:predict") as info:
        asyncio.run(wrong_name.infer_payload({"images": [[0] * 64]}, {}))
    assert info.value.status == 404

    unreachable = load_model(tmp_path, name="digits", predictor_host="127.0.0.1:1")
    with pytest.raises(PredictorError, match="cannot reach predictor 127.0.0.1:1") as info:
        asyncio.run(unreachable.infer_payload({"images": [[0] * 64]}, {}))
    assert info.value.status == 502

    with pytest.raises(ModelLoadError, match="predictor protocol 'grpc-v2' is not supported"):
        load_model(tmp_path, name="digits", predictor_host=host, predictor_protocol="grpc-v2")


def test_kserve_style_constructor_gets_host_and_protocol(tmp_path: Path, predictor: Predictor,
                                                         digits: tuple) -> None:
    x, clf = digits
    write(tmp_path, """
        import json
        import urllib.request

        class KServeStyle:
            def __init__(self, name, predictor_host, protocol):
                self.name, self.predictor_host, self.protocol = name, predictor_host, protocol

            def predict(self, payload, headers=None):
                url = f"http://{self.predictor_host}/{self.protocol}/models/{self.name}:predict"
                request = urllib.request.Request(url, json.dumps(payload).encode(), method="POST")
                with urllib.request.urlopen(request) as response:
                    return json.load(response)
    """)
    model = load_model(tmp_path, name="digits", predictor_host=f"127.0.0.1:{predictor.server_address[1]}",
                       predictor_protocol="v1")
    answer = asyncio.run(model.infer_payload({"instances": (x[:3] / 16).tolist()}, {}))
    assert answer == {"predictions": clf.predict(x[:3] / 16).tolist()}


def test_a_model_ready_after_init_is_not_loaded_again(tmp_path: Path) -> None:
    write(tmp_path, """
        class LoadsItself:
            def __init__(self, name):
                self.loads = 0
                self.load()

            def load(self):
                self.loads += 1
                self.ready = True

            def predict(self, payload, headers=None):
                return {"loads": self.loads}
    """)
    model = load_model(tmp_path, name="m")
    assert asyncio.run(model.infer_payload({}, {})) == {"loads": 1}
