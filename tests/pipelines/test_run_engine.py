"""Runs of real kfp-compiled pipelines on a real control plane: every step a pod, artifacts under the
pipeline root, failures with their log lines, exit handlers, retries, caching, termination, and a run resumed after
the control plane was killed.

One control plane serves the module; each test uses run names of its own.
"""

from __future__ import annotations

import copy
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.helpers import poll
from tests.pipelines.kfp_corpus import compiled, run_local, run_outputs
from trimaran.api.pipelines import RUN_LABEL, TASK_LABEL, TRIMARAN_API_VERSION
from trimaran.cli.client import APIError, Client

NS = "default"
FINISHED = ("SUCCEEDED", "FAILED", "CANCELED")


@pytest.fixture(scope="module")
def extra_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pipeline root outside the home, allowed by TRIMARAN_PIPELINE_ROOTS."""
    return tmp_path_factory.mktemp("extra-root")


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory, extra_root: Path) -> Iterator[ControlPlaneHandle]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRIMARAN_PIPELINE_ROOTS", str(extra_root))  # for the restart in the last test too
        with module_plane(tmp_path_factory, "pipelines-run") as handle:
            yield handle


def start(api: Client, name: str, pipeline: str | dict, parameters: dict[str, Any] | None = None,
          **spec: Any) -> dict:
    pipeline_spec = compiled(pipeline).pipeline_spec if isinstance(pipeline, str) else pipeline
    if isinstance(pipeline, str):
        parameters = {**compiled(pipeline).arguments, **(parameters or {})}
    return api.create("Run", NS, {"apiVersion": TRIMARAN_API_VERSION, "kind": "Run",
                                  "metadata": {"name": name, "namespace": NS},
                                  "spec": {"pipelineSpec": pipeline_spec, "parameters": parameters or {}, **spec}})


def finished(api: Client, name: str, timeout: float = 90.0) -> dict:
    def done() -> dict | None:
        run = api.get("Run", NS, name)
        return run if (run.get("status") or {}).get("state") in FINISHED else None
    return poll(done, timeout=timeout, interval=0.2, what=f"run {name} to finish")


def task(run: dict, name: str) -> dict:
    return next(t for t in run["status"]["tasks"] if t["name"] == name)


def pod_log(api: Client, pod: str) -> str:
    return api.request("GET", f"/api/v1/namespaces/{NS}/pods/{pod}/log", accept="text/plain").read().decode()


def change_spec(api: Client, name: str, **fields: Any) -> None:
    """Set fields of a run's spec as `kfp.Client` does (terminate, retry), again on a conflict with
    the controller's status writes."""
    def put() -> bool:
        run = api.get("Run", NS, name)
        run["spec"].update(fields)
        try:
            api.request("PUT", f"/apis/pipelines.trimaran.io/v1/namespaces/{NS}/runs/{name}", run).read()
        except APIError as exc:
            if exc.status == 409:
                return False
            raise
        return True
    poll(put, timeout=10, interval=0.05, what=f"run {name}'s spec to change")


def marker_dir(plane: ControlPlaneHandle, name: str) -> str:
    """A directory the run's pods may write: under the namespace's runs directory, which every pod
    of the namespace mounts; open to all, since pods' ids are not this user's when it is root."""
    path = plane.home / "pipelines" / "runs" / NS / f"markers-{name}"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)
    return str(path)


def test_artifacts_and_parameters_pass_between_lightweight_steps(api: Client) -> None:
    start(api, "artifacts", "artifacts")
    run = finished(api, "artifacts")
    assert run["status"]["state"] == "SUCCEEDED", run["status"]
    assert task(run, "evaluate")["outputs"]["parameters"]["Output"] == "5 rows=5 weights none acc=0.75 extra raw text"
    train = task(run, "train")
    dataset = train["outputs"]["artifacts"]["dataset"][0]
    root = Path(run["status"]["pipelineRoot"])
    assert Path(dataset["uri"]).is_relative_to(root) and Path(dataset["uri"]).read_text().splitlines()[-1] == "4"
    assert dataset["type"] == "system.Dataset" and dataset["metadata"]["rows"] == 5
    assert train["inputs"]["parameters"] == {"rows": 5}
    assert train["state"] == "SUCCEEDED" and train["startedAt"] and train["finishedAt"] and train["attempts"] == 1
    pod = api.get("Pod", NS, train["podName"])
    assert pod["metadata"]["labels"][RUN_LABEL] == "artifacts" and pod["metadata"]["labels"][TASK_LABEL] == "train"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Run"


def test_container_components_get_every_placeholder(api: Client) -> None:
    start(api, "container", "container")
    run = finished(api, "container")
    assert run["status"]["state"] == "SUCCEEDED", run["status"]
    assert task(run, "count-lines")["outputs"]["parameters"]["Output"] == 2
    logs = {t["id"]: pod_log(api, t["podName"]) for t in run["status"]["tasks"] if t["name"].startswith("show")}
    with_suffix = next(text for text in logs.values() if "label=with/" in text)
    assert "--suffix s" in with_suffix and "container" in with_suffix and "yo\nyo" in with_suffix
    assert any("--no-suffix" in text for text in logs.values())


def test_a_failing_step_fails_the_run_with_its_log_lines_and_the_exit_handler_runs(
        api: Client, plane: ControlPlaneHandle) -> None:
    markers = marker_dir(plane, "exit")
    start(api, "exit", "exit_handler", {"marker_dir": markers})
    run = finished(api, "exit")
    assert run["status"]["state"] == "FAILED"
    assert "fail" in run["status"]["message"] and "about to fail: the last log line" in run["status"]["message"]
    assert task(run, "on-exit")["state"] == "SUCCEEDED"
    seen = json.loads((Path(markers) / "exit-status.json").read_text())
    assert seen["state"] == "FAILED" and seen["job"] == "exit" and seen["task"] == "guarded"


def test_a_step_that_fails_once_is_retried(api: Client, plane: ControlPlaneHandle) -> None:
    start(api, "retries", "retries", {"marker_dir": marker_dir(plane, "retries"), "fail_times": 1})
    run = finished(api, "retries")
    assert run["status"]["state"] == "SUCCEEDED", run["status"]
    flaky = task(run, "flaky")
    assert flaky["attempts"] == 2 and flaky["outputs"]["parameters"]["Output"] == 2


def test_a_second_run_reuses_cached_steps_unless_caching_is_off(api: Client) -> None:
    first = finished(api, start(api, "cache-1", "caching")["metadata"]["name"])
    second = finished(api, start(api, "cache-2", "caching")["metadata"]["name"])
    assert first["status"]["state"] == second["status"]["state"] == "SUCCEEDED"
    cached, fresh = task(second, "cached"), task(second, "uncached")
    assert cached["state"] == "CACHED" and cached["cachedFrom"] == f"cache-1/{task(first, 'cached')['id']}"
    assert cached["outputs"] == task(first, "cached")["outputs"]
    assert fresh["state"] == "SUCCEEDED" and fresh["outputs"] != task(first, "uncached")["outputs"]
    third = finished(api, start(api, "cache-3", "caching", enableCaching=False)["metadata"]["name"])
    assert task(third, "cached")["state"] == "SUCCEEDED"
    assert task(third, "cached")["outputs"] != task(first, "cached")["outputs"]
    # Other inputs: a new fingerprint runs the step again, the pinned key still hits the first run's.
    other = finished(api, start(api, "cache-4", "caching", {"seed": 2})["metadata"]["name"])
    assert task(other, "cached")["state"] == "SUCCEEDED"
    pinned = task(other, "pinned")
    assert pinned["state"] == "CACHED" and pinned["cacheKey"] == "stamp-v1"
    assert pinned["outputs"] == task(first, "pinned")["outputs"]


def test_kfp_kubernetes_settings_reach_the_step_pod(api: Client) -> None:
    api.create("Secret", NS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pipeline-secret"},
                              "stringData": {"password": "s3cret"}})
    api.create("ConfigMap", NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pipeline-config"},
                                 "data": {"mode": "fast"}})
    api.create("PersistentVolumeClaim", NS, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "pipeline-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}})
    start(api, "platform", "kubernetes", platformSpec=compiled("kubernetes").platform_spec)
    run = finished(api, "platform")
    assert run["status"]["state"] == "SUCCEEDED", run["status"]
    step = task(run, "inspect")
    assert step["outputs"]["parameters"]["Output"] == "s3cret|fast|fast|s3cret"
    pod = api.get("Pod", NS, step["podName"])
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["spec"]["tolerations"][0]["key"] == "dedicated"
    assert pod["metadata"]["labels"]["team"] == "ml" and pod["metadata"]["annotations"]["note"] == "from kfp-kubernetes"


def test_an_importer_hands_a_file_under_an_allowed_root_on(api: Client, plane: ControlPlaneHandle) -> None:
    data = Path(marker_dir(plane, "importer")) / "data.txt"
    data.write_text("imported rows")
    start(api, "importer", "importer", {"uri": str(data)})
    run = finished(api, "importer")
    assert run["status"]["state"] == "SUCCEEDED", run["status"]
    imported = next(t for t in run["status"]["tasks"] if t["type"] == "importer")
    assert imported["outputs"]["artifacts"]["artifact"][0]["uri"] == str(data)
    assert task(run, "read")["outputs"]["parameters"]["Output"] == "imported rows test 6 ['by-test', 'rows', 'source']"
    assert imported["outputs"]["artifacts"]["artifact"][0]["metadata"] == {"source": "test", "rows": 3,
                                                                           "by-test": "constant"}
    start(api, "importer-outside", "importer", {"uri": "/etc/hostname"})
    refused = finished(api, "importer-outside")
    assert refused["status"]["state"] == "FAILED" and "outside the allowed roots" in refused["status"]["message"]


def test_an_import_is_the_same_artifact_again_unless_reimport_or_its_metadata_changes(
        api: Client, plane: ControlPlaneHandle) -> None:
    data = Path(marker_dir(plane, "reimport")) / "data.txt"
    data.write_text("rows")
    reading = {}
    for name, parameters, reimport in (("import-1", {}, False), ("import-2", {}, False),
                                       ("import-3", {}, True), ("import-4", {"source": "other"}, False)):
        spec = copy.deepcopy(compiled("importer").pipeline_spec)
        spec["deploymentSpec"]["executors"]["exec-importer"]["importer"]["reimport"] = reimport
        start(api, name, spec, {"uri": str(data), **parameters})
        run = finished(api, name)
        assert run["status"]["state"] == "SUCCEEDED", run["status"]
        reading[name] = task(run, "read")
    assert reading["import-1"]["state"] == "SUCCEEDED"
    assert reading["import-2"]["state"] == "CACHED" and reading["import-2"]["cachedFrom"] == "import-1/read"
    assert reading["import-3"]["state"] == "SUCCEEDED"  # reimport: another artifact, read again
    assert reading["import-4"]["state"] == "SUCCEEDED"  # other metadata: another artifact
    assert reading["import-4"]["outputs"]["parameters"]["Output"] == "rows other 6 ['by-other', 'rows', 'source']"


def test_deleting_a_run_keeps_its_artifacts_and_their_cache_entries(api: Client) -> None:
    """As KFP: deleting a run (kfp.Client's delete_run) removes the run and its pods; its artifacts stay
    in the store, and a later run with the same inputs is served from them while they are there."""
    start(api, "deleted", "artifacts", {"rows": 17})
    run = finished(api, "deleted")
    assert run["status"]["state"] == "SUCCEEDED", run["status"]
    uris = [ref["uri"] for t in run["status"]["tasks"] for refs in ((t.get("outputs") or {}).get("artifacts") or {}
                                                                   ).values() for ref in refs]
    assert len(uris) == 7 and all(uri.startswith(run["status"]["pipelineRoot"]) for uri in uris)
    written = {uri: Path(uri).read_bytes() for uri in uris if Path(uri).exists()}  # Metrics are metadata alone
    assert len(written) == 5
    pods = [t["podName"] for t in run["status"]["tasks"] if t.get("podName")]
    api.request("DELETE", f"/apis/v2beta1/runs/{run['metadata']['uid']}").read()

    def gone(kind: str, name: str) -> bool:
        try:
            api.get(kind, NS, name)
        except APIError as exc:
            return exc.status == 404
        return False
    poll(lambda: gone("Run", "deleted") and all(gone("Pod", p) for p in pods), timeout=30, interval=0.2,
         what="the run and its pods to be deleted")
    assert {uri: Path(uri).read_bytes() for uri in written} == written
    start(api, "after-delete", "artifacts", {"rows": 17})
    again = finished(api, "after-delete")
    assert [t.get("cachedFrom") for t in again["status"]["tasks"] if t["type"] == "container"] == [
        "deleted/train", "deleted/evaluate"]  # a Metrics output, metadata alone, needs no file
    Path(next(uri for uri in written if uri.endswith("/dataset"))).unlink()
    start(api, "after-removal", "artifacts", {"rows": 17})
    assert task(finished(api, "after-removal"), "train")["state"] == "SUCCEEDED"  # its dataset is gone: run again


def test_an_output_artifact_pointed_outside_the_allowed_roots_fails_its_step(api: Client) -> None:
    spec = copy.deepcopy(compiled("artifacts").pipeline_spec)
    command = spec["deploymentSpec"]["executors"]["exec-train"]["container"]["command"]
    command[-1] = command[-1].replace('model.metadata["framework"] = "none"', 'model.uri = "/root"')
    assert 'model.uri = "/root"' in command[-1]
    start(api, "escape", spec, {"rows": 19})
    run = finished(api, "escape")
    assert run["status"]["state"] == "FAILED"
    assert run["status"]["message"].startswith("task train failed: output artifact 'model': uri '/root' is outside "
                                               "the allowed roots"), run["status"]["message"]
    assert task(run, "evaluate")["state"] == "SKIPPED"


def test_resources_reach_admission_and_env_reaches_the_step(api: Client) -> None:
    start(api, "resources", "resources")
    # The accelerator step waits for a GPU this node lacks (or runs where it has one); the other ends.
    def env_done() -> dict | None:
        run = api.get("Run", NS, "resources")
        steps = [t for t in (run.get("status") or {}).get("tasks") or [] if t["type"] == "container"]
        return run if any(t["name"] == "read-env" and t["state"] == "SUCCEEDED" for t in steps) and all(
            t.get("podName") for t in steps) else None
    run = poll(env_done, timeout=60, interval=0.2, what="the env step to succeed")
    read_env = task(run, "read-env")
    assert read_env["outputs"]["parameters"]["Output"] == "hello from env"
    pod = api.get("Pod", NS, read_env["podName"])
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "1", "memory": "512Mi"},
                                                         "requests": {"cpu": "100m", "memory": "64Mi"}}
    gpu_step = next(t for t in run["status"]["tasks"] if t["type"] == "container" and t["name"] != "read-env")
    gpu_pod = api.get("Pod", NS, gpu_step["podName"])
    assert gpu_pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    change_spec(api, "resources", terminate=True)
    assert finished(api, "resources", timeout=30)["status"]["state"] in ("CANCELED", "SUCCEEDED")


def with_packages(*packages: str) -> dict:
    """The hello pipeline as the compiler writes it for `@dsl.component(packages_to_install=[...])`:
    a second `pip install` in the preamble."""
    spec = copy.deepcopy(compiled("hello").pipeline_spec)
    container = spec["deploymentSpec"]["executors"]["exec-greet"]["container"]
    quoted = " ".join(f"'{p}'" for p in packages)
    container["command"][2] = container["command"][2].replace(
        '&& "$0" "$@"', f'&& python3 -m pip install --quiet --no-warn-script-location {quoted} && "$0" "$@"')
    return spec


def test_packages_to_install_come_from_the_pods_interpreter_or_fail_the_step(api: Client) -> None:
    start(api, "packages-present", with_packages("PyYAML>=5"), {"name": "yaml"})
    run = finished(api, "packages-present")
    assert run["status"]["state"] == "SUCCEEDED", run["status"]
    start(api, "packages-missing", with_packages("PyYAML", "no-such-package-for-trimaran==1.0"), {"name": "x"})
    run = finished(api, "packages-missing")
    assert run["status"]["state"] == "FAILED"
    assert "no-such-package-for-trimaran==1.0" in run["status"]["message"]
    assert "PyYAML" not in run["status"]["message"] and not task(run, "greet").get("podName")


def test_a_pipeline_root_must_lie_under_an_allowed_root(api: Client, extra_root: Path) -> None:
    start(api, "root-allowed", "hello", pipelineRoot=f"file://{extra_root}")
    run = finished(api, "root-allowed")
    assert run["status"]["state"] == "SUCCEEDED", run["status"]
    assert Path(run["status"]["pipelineRoot"]).parent == extra_root / NS
    # Refused before it is stored, with the field's path (kfp.Client's runtime_config.pipeline_root alike).
    with pytest.raises(APIError) as refused:
        start(api, "root-refused", "hello", pipelineRoot="/etc/pipelines")
    assert refused.value.status == 422
    assert ('spec.pipelineRoot: Invalid value: "/etc/pipelines": is outside the allowed roots'
            in str(refused.value)), str(refused.value)
    with pytest.raises(APIError, match="spec.pipelineRoot: Invalid value: \"s3://bucket\": must be an absolute"):
        start(api, "root-remote", "hello", pipelineRoot="s3://bucket")
    with pytest.raises(APIError):
        api.get("Run", NS, "root-refused")


def sleeper(seconds: int) -> dict:
    """A one-step pipeline whose container sleeps (written as the compiler writes it)."""
    return {"pipelineInfo": {"name": "sleeper"}, "schemaVersion": "2.1.0", "sdkVersion": "kfp-2.17.3",
            "components": {"comp-sleep": {"executorLabel": "exec-sleep"}},
            "deploymentSpec": {"executors": {"exec-sleep": {"container": {
                "image": "busybox", "command": ["sleep"], "args": [str(seconds)]}}}},
            "root": {"dag": {"tasks": {"sleep": {"componentRef": {"name": "comp-sleep"},
                                                 "taskInfo": {"name": "sleep"}}}}}}


def test_terminate_stops_the_running_step(api: Client) -> None:
    start(api, "terminate", sleeper(300))
    poll(lambda: (api.get("Run", NS, "terminate").get("status") or {}).get("state") == "RUNNING",
         timeout=30, interval=0.2, what="the run to start")
    change_spec(api, "terminate", terminate=True)
    run = finished(api, "terminate", timeout=30)
    assert run["status"]["state"] == "CANCELED"
    assert task(run, "sleep")["state"] == "CANCELED"
    pods = api.list("Pod", NS, selector=f"{RUN_LABEL}=terminate")
    assert all(p["status"]["phase"] != "Running" or p["metadata"].get("deletionTimestamp") for p in pods)


@pytest.mark.parametrize(("name", "arguments", "expected"), [
    ("oneof_parameter", {"n": 3}, {"Output": "many"}),  # dsl.OneOf over an If/Elif/Else chain
    ("loops", {}, None),  # ParallelFor over a list and over a task's output, dsl.Collected
    ("nested", {}, None),  # a pipeline used as a component inside another
])
def test_same_outputs_as_kfp_local(api: Client, tmp_path: Path, name: str, arguments: dict,
                                   expected: dict | None) -> None:
    """Control flow on real step pods gives what kfp.local's SubprocessRunner gives."""
    pipeline = compiled(name)
    start(api, f"parity-{name.replace('_', '-')}", name, arguments)
    local = run_local(name, tmp_path, arguments)  # while the run goes
    run = finished(api, f"parity-{name.replace('_', '-')}")
    assert local["error"] is None and local["outputs"], local
    if expected is not None:
        assert local["outputs"] == expected
    assert run_outputs(pipeline.pipeline_spec, run) == local["outputs"]


def test_retrying_a_failed_run_runs_its_failed_step_again(api: Client, plane: ControlPlaneHandle) -> None:
    # Four attempts (three retries) fail; the run's retry makes a fifth, which succeeds.
    start(api, "retried", "retries", {"marker_dir": marker_dir(plane, "retried"), "fail_times": 4})
    failed = finished(api, "retried")
    assert failed["status"]["state"] == "FAILED" and task(failed, "flaky")["attempts"] == 4
    change_spec(api, "retried", retry=1)
    run = poll(lambda: (r := api.get("Run", NS, "retried"))["status"].get("observedRetry") == 1
               and r["status"]["state"] in FINISHED and r, timeout=60, interval=0.2, what="the retried run to end")
    assert run["status"]["state"] == "SUCCEEDED", run["status"]
    flaky = task(run, "flaky")
    assert flaky["outputs"]["parameters"]["Output"] == 5 and flaky["podName"] != task(failed, "flaky")["podName"]


def two_steps(go: str) -> dict:
    """A pipeline as the compiler writes it: a container step that waits for the file `go` and
    outputs "done", then a step that takes that output."""
    def component(output: bool) -> dict:
        spec: dict = {"executorLabel": "exec-wait" if output else "exec-after"}
        if output:
            spec["outputDefinitions"] = {"parameters": {"out": {"parameterType": "STRING"}}}
        else:
            spec["inputDefinitions"] = {"parameters": {"word": {"parameterType": "STRING"}}}
        return spec

    wait = ['while [ ! -f "$0" ]; do sleep 0.05; done; mkdir -p "$(dirname "$1")"; printf done > "$1"']
    return {
        "pipelineInfo": {"name": "resume"}, "schemaVersion": "2.1.0", "sdkVersion": "kfp-2.17.3",
        "components": {"comp-wait": component(True), "comp-after": component(False)},
        "deploymentSpec": {"executors": {
            "exec-wait": {"container": {"image": "busybox", "command": ["sh", "-c", *wait],
                                        "args": [go, "{{$.outputs.parameters['out'].output_file}}"]}},
            "exec-after": {"container": {"image": "busybox", "command": ["echo"],
                                         "args": ["{{$.inputs.parameters['word']}}"]}}}},
        "root": {"dag": {"tasks": {
            "wait": {"componentRef": {"name": "comp-wait"}, "taskInfo": {"name": "wait"}},
            "after": {"componentRef": {"name": "comp-after"}, "taskInfo": {"name": "after"},
                      "dependentTasks": ["wait"],
                      "inputs": {"parameters": {"word": {"taskOutputParameter": {
                          "producerTask": "wait", "outputParameterKey": "out"}}}}}}}},
    }


def shims(plane: ControlPlaneHandle) -> set[int]:
    """The pod shims' pids (what runs under them comes and goes: the step polls with `sleep`)."""
    found = set()
    for proc in plane.pod_processes():
        try:
            if "runtime/shim.py" in " ".join(proc.cmdline()):
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


def test_a_killed_control_plane_resumes_the_run_without_rerunning_steps(plane: ControlPlaneHandle) -> None:
    """Last in the module: it kills and restarts the module's control plane."""
    from trimaran.server.daemon import read_server_info, start_server

    go = plane.home / "pipelines" / "runs" / NS / "go-resume"
    go.parent.mkdir(parents=True, exist_ok=True)
    api = plane.client()  # its own client: the module's one is left on the killed control plane
    api.create("Run", NS, {"apiVersion": TRIMARAN_API_VERSION, "kind": "Run", "metadata": {"name": "resume"},
                           "spec": {"pipelineSpec": two_steps(str(go))}})

    def waiting_pod() -> str | None:
        tasks = (api.get("Run", NS, "resume").get("status") or {}).get("tasks") or []
        return next((t["podName"] for t in tasks if t["name"] == "wait" and t["state"] == "RUNNING"), None)

    pod = poll(waiting_pod, timeout=60, interval=0.1, what="the first step to run")
    before = shims(plane)
    assert before
    api.close()

    os.kill(int(read_server_info(plane.home)["pid"]), signal.SIGKILL)
    assert shims(plane) == before  # the step lives on under its shim
    start_server(home=plane.home)
    go.write_text("")

    api = plane.client()
    run = poll(lambda: (r := api.get("Run", NS, "resume"))["status"].get("state") in ("SUCCEEDED", "FAILED") and r,
               timeout=60, interval=0.1, what="the run to finish")
    assert run["status"]["state"] == "SUCCEEDED", run["status"]
    tasks = {t["name"]: t for t in run["status"]["tasks"]}
    assert tasks["wait"]["podName"] == pod and tasks["wait"]["attempts"] == 1, "adopted, not run again"
    assert tasks["after"]["inputs"]["parameters"] == {"word": "done"}
    assert [p["metadata"]["name"] for p in api.list("Pod", NS)].count(pod) == 1
    api.close()
    poll(lambda: not plane.pod_processes(), timeout=30, what="pod processes to exit")
