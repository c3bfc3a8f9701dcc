"""Model versions on disk: hot swap under load, failed loads, policies, readiness without a model."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import joblib

from tests.helpers import poll
from tests.serving.models import Constant, write_version

ROW = {"inputs": [{"name": "input-0", "shape": [1, 2], "datatype": "FP32", "data": [1, 0]}]}


def answer(client: httpx.Client, version: str | None = None) -> tuple[int, int | None, str | None]:
    path = f"/v2/models/digits/versions/{version}/infer" if version else "/v2/models/digits/infer"
    r = client.post(path, json=ROW)
    if r.status_code != 200:
        return r.status_code, None, None
    body = r.json()
    return 200, body["outputs"][0]["data"][0], body["model_version"]


def fresh_answer(url: str) -> tuple[int, int | None, str | None]:
    """An answer over a new connection (the kernel may give it to any worker)."""
    with httpx.Client(base_url=url) as client:
        return answer(client)


def test_hot_swap_under_load_fails_no_request(start_server, tmp_path: Path) -> None:
    base = tmp_path / "model"
    base.mkdir()
    write_version(base, 1, Constant(1))
    server = start_server(base, workers=2, poll_interval=0.1).wait_ready()
    # Both workers must serve version 1 before the swap, so that the swap is seen by both under load.
    poll(lambda: all(fresh_answer(server.url)[1] == 1 for _ in range(8)), what="v1 everywhere")
    results: list[tuple] = []
    stop = threading.Event()

    def hammer() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            while not stop.is_set():
                results.append(answer(client))

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        poll(lambda: len(results) > 50, what="load before the swap")
        write_version(base, 2, Constant(2))
        # Every worker has swapped when a run of answers is all from version 2.
        poll(lambda: len(results) > 20 and all(r[1] == 2 for r in results[-20:]), timeout=15,
             what="version 2 answering")
        seen = len(results)
        poll(lambda: len(results) > seen + 50, what="load after the swap")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert all(r[0] == 200 for r in results), [r for r in results if r[0] != 200][:5]
    assert {r[1] for r in results} == {1, 2}
    assert {r[2] for r in results} == {"1", "2"}
    status = server.client.get("/v1/models/digits").json()["model_version_status"]
    assert status[0] == {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    assert status[1]["version"] == "1" and status[1]["state"] == "END"
    assert "version 1 unloaded" in server.log()


def test_bad_version_keeps_the_old_one_serving(start_server, tmp_path: Path) -> None:
    base = tmp_path / "model"
    base.mkdir()
    write_version(base, 1, Constant(1))
    server = start_server(base, poll_interval=0.1).wait_ready()
    staging = tmp_path / "broken"
    staging.mkdir()
    (staging / "model.joblib").write_bytes(b"not a pickle")
    staging.rename(base / "2")

    def failed() -> dict | None:
        status = server.client.get("/v1/models/digits").json()["model_version_status"]
        return status[0] if status[0]["version"] == "2" and status[0]["state"] == "END" else None

    entry = poll(failed, what="version 2 reported failed")
    assert entry["status"]["error_code"] == "UNKNOWN"
    assert "model.joblib" in entry["status"]["error_message"]
    assert answer(server.client) == (200, 1, "1")
    r = server.client.get("/v2/models/digits/versions/2")
    assert r.status_code == 503 and "model.joblib" in r.json()["error"]
    assert server.client.get("/v2/models/digits/versions/2/ready").status_code == 503
    assert "version 2 failed to load" in server.log()
    # Fixing the files retries the load.
    joblib.dump(Constant(2), base / "2" / "model.joblib")
    poll(lambda: answer(server.client)[1] == 2, what="the fixed version 2 serving")


def test_version_policies(start_server, tmp_path: Path) -> None:
    base = tmp_path / "model"
    base.mkdir()
    for v in (1, 2, 3):
        write_version(base, v, Constant(v))
    every = start_server(base, version_policy="all", grpc=False)
    pinned = start_server(base, version_policy="specific:1,3", grpc=False)
    latest2 = start_server(base, version_policy="latest:2", grpc=False)
    latest = start_server(base, grpc=False)
    for server, versions in ((every, ["3", "2", "1"]), (pinned, ["3", "1"]), (latest2, ["3", "2"]),
                             (latest, ["3"])):
        server.wait_ready()
        poll(lambda s=server, v=versions: s.client.get("/v2/models/digits").json()["versions"] == v,
             what=f"versions {versions}")
        for v in versions:
            assert answer(server.client, v) == (200, int(v), v)
        assert answer(server.client) == (200, 3, "3")  # no version: the latest served
    assert answer(pinned.client, "2")[0] == 404
    assert answer(latest.client, "1")[0] == 404


def test_kserve_layout_is_version_1(start_server, tmp_path: Path) -> None:
    joblib.dump(Constant(7), tmp_path / "model.joblib")
    server = start_server(tmp_path, grpc=False).wait_ready()
    assert answer(server.client) == (200, 7, "1")


def test_no_loadable_version_is_not_ready_and_says_why(start_server, tmp_path: Path) -> None:
    base = tmp_path / "model"
    base.mkdir()
    missing = start_server(tmp_path / "absent", grpc=False).wait_live()
    empty = start_server(base, poll_interval=0.1, grpc=False).wait_live()
    poll(lambda: "does not exist" in missing.client.get("/v2/health/ready").text, what="missing path reason")
    ready = poll(lambda: (r := empty.client.get("/v2/health/ready")).status_code == 503
                 and "no model version" in r.text and r, what="empty base reason")
    assert ready.json()["ready"] is False
    r = empty.client.post("/v2/models/digits/infer", json=ROW)
    assert r.status_code == 503 and "no model version under" in r.json()["error"]
    assert empty.client.get("/v1/models/digits").status_code == 503
    assert "is not ready: no model version under" in empty.log()
    write_version(base, 1, Constant(1))
    empty.wait_ready()
    assert answer(empty.client) == (200, 1, "1")
