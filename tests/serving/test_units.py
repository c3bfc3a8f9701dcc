"""The server's pure parts in-process: version policies, directory layouts, codecs, the batcher's split."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from trimaran.serving import codec
from trimaran.serving.batching import Dispatcher
from trimaran.serving.config import ServerConfig, VersionPolicy
from trimaran.serving.errors import InvalidInput, Overloaded, RequestTimeout
from trimaran.serving.repository import scan
from trimaran.serving.runtimes import InferenceInputError


@pytest.mark.parametrize(("text", "present", "wanted"), [
    ("latest", [1, 2, 10], {10}),
    ("latest:2", [1, 2, 10], {2, 10}),
    ("all", [3, 1], {1, 3}),
    ("specific:1,3", [1, 2], {1}),
])
def test_version_policies(text: str, present: list[int], wanted: set[int]) -> None:
    policy = VersionPolicy.parse(text)
    assert policy.select(present) == wanted
    assert VersionPolicy.parse(str(policy)) == policy


@pytest.mark.parametrize("text", ["latest:0", "newest", "specific:", "specific:a", "all:2"])
def test_bad_version_policies(text: str) -> None:
    with pytest.raises(ValueError):
        VersionPolicy.parse(text)


def test_config_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="latest"):
        ServerConfig("m", "/x", version_policy="newest")
    with pytest.raises(ValueError, match="predictor-protocol"):
        ServerConfig("m", "/x", predictor_protocol="v3")
    assert ServerConfig("m", "/x").workers >= 1


def test_layouts(tmp_path: Path) -> None:
    assert scan(tmp_path / "absent") == {}
    assert scan(tmp_path) == {}
    (tmp_path / "model.joblib").write_bytes(b"x")
    assert scan(tmp_path) == {1: tmp_path}  # KServe layout: the model itself is version 1
    (tmp_path / "3").mkdir()
    (tmp_path / "12").mkdir()
    (tmp_path / "notes").mkdir()
    assert scan(tmp_path) == {3: tmp_path / "3", 12: tmp_path / "12"}
    assert scan(tmp_path / "model.joblib") == {1: tmp_path / "model.joblib"}


def test_raw_bytes_round_trip_and_errors() -> None:
    values = np.array([b"", b"abc", "é".encode()], dtype=object)
    raw = codec.array_to_raw(values)
    assert codec.raw_to_array(raw, np.dtype(object), (3,), "x").tolist() == values.tolist()
    with pytest.raises(InvalidInput, match="end before element 4"):
        codec.raw_to_array(raw, np.dtype(object), (4,), "x")
    with pytest.raises(InvalidInput, match="more than 2"):
        codec.raw_to_array(raw, np.dtype(object), (2,), "x")
    with pytest.raises(InvalidInput, match="needs 16 bytes, got 12"):
        codec.raw_to_array(b"\0" * 12, np.dtype(np.float32), (2, 2), "x")


def test_v2_decode_checks() -> None:
    tensor = {"name": "a", "shape": [2, 2], "datatype": "INT32", "data": [[1, 2], [3, 4]]}
    request = codec.decode_v2({"inputs": [tensor], "outputs": [{"name": "o", "parameters": {"binary_data": True}}],
                               "id": 5}, None)
    assert request.inputs["a"].dtype == np.int32 and request.inputs["a"].shape == (2, 2)
    assert request.outputs == ["o"] and request.binary_outputs == {"o"} and request.id == 5
    for bad, words in [({"inputs": [{"name": "a", "shape": [-1], "datatype": "FP32", "data": []}]}, "shape"),
                       ({"inputs": [{"name": "a", "shape": [1], "datatype": "BF16", "data": [1]}]}, "BF16"),
                       ({"inputs": [{"name": "a", "shape": [1], "datatype": "BOOL", "data": [1]}]}, "true or false"),
                       ({"inputs": [{"name": "a", "shape": [1], "datatype": "UINT8", "data": [300]}]}, "UINT8"),
                       ({"inputs": [{"name": "a", "shape": [1], "datatype": "BYTES", "data": [1]}]}, "strings"),
                       ({"inputs": [{"name": "a", "shape": [1], "datatype": "FP32"}]}, "no data")]:
        with pytest.raises(InvalidInput, match=words):
            codec.decode_v2(bad, None)


class RowModel:
    """Answers ``10 * x`` per row; a row holding -1 is refused (as a runtime refuses bad input)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def predict(self, inputs: dict, *, signature_name: str | None = None, outputs: object = None) -> dict:
        x = inputs["x"]
        self.calls.append(len(x))
        if (x == -1).any():
            raise InferenceInputError("row with -1")
        return {"y": x[:, 0] * 10, "first": x[:1, 0]} if outputs == ["first"] else {"y": x[:, 0] * 10}


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def make(model: RowModel, **kw: object) -> Dispatcher:
    options = {"batchable": True, "max_batch_size": 8, "max_batch_latency": 0.01, "max_queue": 100, "timeout": 5.0,
               "on_batch": lambda s, n: None, "on_queue": lambda d: None, **kw}
    return Dispatcher(model.predict, **options)  # type: ignore[arg-type]


def test_batches_split_back_to_their_callers() -> None:
    model = RowModel()

    async def main() -> list:
        dispatcher = make(model)
        futures = [dispatcher.submit({"x": np.arange(i, i + 1 + i % 3, dtype=float)[:, None]}, None, None)
                   for i in range(8)]
        return await asyncio.gather(*futures)

    results = run(main())
    assert model.calls == [sum(1 + i % 3 for i in range(8))]  # one merged call
    for i, result in enumerate(results):
        assert result["y"].tolist() == [10.0 * v for v in range(i, i + 1 + i % 3)]


def test_a_bad_request_fails_alone_and_mixed_shapes_run_apart() -> None:
    model = RowModel()

    async def main() -> list:
        dispatcher = make(model)
        futures = [dispatcher.submit({"x": np.array([[1.0]])}, None, None),
                   dispatcher.submit({"x": np.array([[-1.0]])}, None, None),
                   dispatcher.submit({"x": np.array([[2.0, 5.0]])}, None, None)]
        return await asyncio.gather(*futures, return_exceptions=True)

    good, bad, wide = run(main())
    assert good["y"].tolist() == [10.0] and wide["y"].tolist() == [20.0]
    assert isinstance(bad, InferenceInputError)
    assert model.calls == [1, 1, 1]  # widths differ: each request on its own


def test_outputs_without_the_batch_dimension_are_not_split() -> None:
    model = RowModel()

    async def main() -> list:
        dispatcher = make(model)
        return await asyncio.gather(*(dispatcher.submit({"x": np.array([[float(i)], [i + 0.5]])}, ["first"], None)
                                      for i in range(3)))

    results = run(main())
    assert [r["first"].tolist() for r in results] == [[0.0], [1.0], [2.0]]
    assert model.calls[0] == 6 and model.calls[1:] == [2, 2, 2]  # merged answer unsplittable: rerun apart


def test_queue_bound_and_timeout() -> None:
    async def main() -> None:
        dispatcher = make(RowModel(), max_queue=2, max_batch_latency=10.0, timeout=0.05)
        first = dispatcher.submit({"x": np.array([[1.0]])}, None, None)
        dispatcher.submit({"x": np.array([[2.0]])}, None, None)
        with pytest.raises(Overloaded):
            dispatcher.submit({"x": np.array([[3.0]])}, None, None)
        with pytest.raises(RequestTimeout):
            await first

    run(main())


def test_a_retired_version_closes_after_its_last_request() -> None:
    from trimaran.serving.repository import ModelVersion

    class Closable:
        closed = 0

        def close(self) -> None:
            self.closed += 1

    model = Closable()
    version = ModelVersion(model, "1")  # type: ignore[arg-type]
    first, second = version.acquire(), version.acquire()
    version.retire()
    first.release()
    assert model.closed == 0  # a request still uses it
    second.release()
    assert model.closed == 1


def test_a_fast_model_runs_inline_without_cpu_clock_reads_and_a_slowed_one_goes_back_to_its_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from trimaran.serving import batching

    delay = 0.0
    cpu_reads = 0
    thread_time = time.thread_time

    def counted() -> float:
        nonlocal cpu_reads
        cpu_reads += 1
        return thread_time()

    def predict(inputs: dict, signature_name: str | None = None, outputs: list | None = None) -> dict:
        if delay:
            time.sleep(delay)  # the model's own work: a slow model, not a wait for a state
        return {"y": inputs["x"] * 2}

    monkeypatch.setattr(batching.time, "thread_time", counted)
    dispatcher = Dispatcher(predict, batchable=True, max_batch_size=1, max_batch_latency=0.0, max_queue=10,
                            timeout=5.0, on_batch=lambda s, n: None, on_queue=lambda d: None)

    async def call() -> tuple[bool, dict]:
        result = dispatcher.submit({"x": np.ones(2)}, None, None)
        inline = isinstance(result, dict)
        return inline, result if inline else await result

    async def main() -> None:
        nonlocal delay
        first = [await call() for _ in range(batching.SAMPLES_BEFORE_INLINE + 1)]
        assert not first[0][0], "a model starts on its thread"
        assert first[-1][0], "a fast model moves inline"
        reads = cpu_reads
        inline, answer = await call()
        assert inline and answer["y"].tolist() == [2.0, 2.0]
        assert cpu_reads == reads, "an inline call reads no CPU clock"
        delay = 2 * batching.THREAD_WALL
        modes = [(await call())[0] for _ in range(10)]
        assert not modes[-1], f"a slowed model goes back to its thread: {modes}"

    run(main())
