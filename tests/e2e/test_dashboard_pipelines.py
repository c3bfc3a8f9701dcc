"""Pipeline runs in the dashboard, as a browser reads them from a real control plane: the runs list,
a run's graph, its tasks' parameters, Metrics and ClassificationMetrics as tables, HTML and Markdown
artifacts in a sandboxed frame, a task's log, and an artifact route that serves nothing outside the
run's pipeline root.

The run is the corpus' ``artifacts`` pipeline, created with ``trimaran run``; its status (the
tasks, their artifacts under a pipeline root of the test's) is written through the API's status
subresource as the Run controller writes it, and the ``train`` task's pod is a real pod, with the
run and task labels, whose log the page shows.
"""

from __future__ import annotations

import html
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.e2e.test_dashboard import _ENDPOINTS, _get, _page
from tests.helpers import poll
from tests.pipelines.kfp_corpus import compiled

RUN = "art"


def _status(root: Path) -> dict:
    """What the Run controller reports of a run whose ``train`` succeeded and ``evaluate`` failed."""
    files = {"metrics": "", "confusion": "", "report": "<h1>report</h1><script>alert(1)</script>",
             "notes": "# notes\n*bold* <script>alert(1)</script>\n"}
    for name, text in files.items():
        (root / "train" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "train" / name).write_text(text)
    artifacts = {
        "metrics": [{"name": "metrics", "uri": str(root / "train/metrics"), "type": "system.Metrics",
                     "metadata": {"accuracy": 0.75, "rows": 5, "display_name": "metrics"}}],
        "confusion": [{"name": "confusion", "uri": str(root / "train/confusion"),
                       "type": "system.ClassificationMetrics",
                       "metadata": {"confusionMatrix": {"annotationSpecs": [{"displayName": "a"}, {"displayName": "b"}],
                                                        "rows": [{"row": [3, 1]}, {"row": [0, 4]}]},
                                    "confidenceMetrics": [
                                        {"confidenceThreshold": 1.0, "recall": 0.0, "falsePositiveRate": 0.0},
                                        {"confidenceThreshold": 0.5, "recall": 0.8, "falsePositiveRate": 0.5},
                                        {"confidenceThreshold": 0.0, "recall": 1.0, "falsePositiveRate": 1.0}]}}],
        "report": [{"name": "report", "uri": f"file://{root}/train/report", "type": "system.HTML"}],
        "notes": [{"name": "notes", "uri": str(root / "train/notes"), "type": "system.Markdown"}],
    }
    return {"state": "FAILED", "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:12Z",
            "pipelineRoot": str(root), "message": "task evaluate failed",
            "tasks": [
                {"id": "train", "name": "train", "component": "comp-train", "state": "SUCCEEDED",
                 "podName": "art-train", "attempts": 1, "startedAt": "2026-01-01T00:00:00Z",
                 "finishedAt": "2026-01-01T00:00:05Z",
                 "inputs": {"parameters": {"rows": 5}}, "outputs": {"artifacts": artifacts}},
                {"id": "evaluate", "name": "evaluate", "component": "comp-evaluate", "state": "FAILED", "attempts": 2,
                 "message": "exit code 1; last lines:\nValueError: <b>bad</b>"}]}


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlaneHandle, str, Path]]:
    pipeline = compiled("artifacts")
    with module_plane(tmp_path_factory, "dashboard-pipelines") as handle:
        url, token, context = handle.endpoint()
        _ENDPOINTS[urllib.parse.urlsplit(url).port] = (token, context)
        handle.cli("run", "-f", str(pipeline.path), "-p", "rows=5", "--name", RUN, "--experiment", "demo")
        root = handle.home.parent / "root"
        client = handle.client()
        client.create("Pod", "default", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "art-train", "labels": {"pipelines.trimaran.io/run": RUN,
                                                         "pipelines.trimaran.io/task": "train"}},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "x", "command": ["sh", "-c", "echo training on 5 rows"]}]}})
        poll(lambda: client.get("Pod", "default", "art-train").get("status", {}).get("phase") == "Succeeded",
             timeout=60, what="the train pod to finish")
        client.request("PATCH", "/apis/pipelines.trimaran.io/v1/namespaces/default/runs/art/status",
                       {"status": _status(root)}, content_type="application/merge-patch+json").read()
        yield handle, url, root


def test_runs_list_shows_state_duration_and_experiment(plane):
    _, url, _ = plane
    page = _page(f"{url}/dashboard/runs")
    row = re.search(r'<tr><td>default</td><td><a href="/dashboard/runs/default/art">art</a>.*?</tr>', page).group(0)
    assert "FAILED" in row and "12.0s" in row and "demo" in row and "<td>2/2</td>" in row
    assert 'href="/dashboard/runs"' in _page(f"{url}/dashboard/"), "every page links to the runs"


def test_run_page_draws_the_graph_and_each_task(plane):
    _, url, _ = plane
    page = _page(f"{url}/dashboard/runs/default/art")
    assert '<g class="task state-SUCCEEDED" data-task="train">' in page
    assert '<g class="task state-FAILED" data-task="evaluate">' in page
    assert '<path class="edge" data-from="train" data-to="evaluate"' in page, "evaluate reads train's outputs"
    assert 'href="#task-train"' in page and '<section id="task-train" class="task">' in page
    assert "training on 5 rows" in page, "the train pod's log tail"
    assert html.escape("ValueError: <b>bad</b>") in page and "<b>bad</b>" not in page
    # Metrics as a table, the confusion matrix as one, the ROC as a chart.
    assert "<td>accuracy</td><td>0.75</td>" in page
    assert re.search(r'<table class="confusion-matrix">.*<th>a</th><td>3</td><td>1</td>.*<th>b</th><td>0</td>'
                     r"<td>4</td>", page)
    assert 'data-series="ROC"' in page
    assert 'http-equiv="refresh"' not in page, "a finished run's page stays still"


def test_html_and_markdown_artifacts_are_sandboxed(plane):
    _, url, root = plane
    page = _page(f"{url}/dashboard/runs/default/art")
    frames = re.findall(r'<iframe class="artifact-view" sandbox="" [^>]*src="([^"]+)"', page)
    assert len(frames) == 2
    status, _, headers = _get(f"{url}/dashboard/runs/default/art")
    assert "frame-src 'self'" in headers["content-security-policy"]
    for src in frames:
        status, body, headers = _get(url + html.unescape(src))
        assert status == 200, body
        policy = headers["content-security-policy"]
        assert "sandbox" in policy and "default-src 'none'" in policy and "script-src" not in policy
        if "render=markdown" in src:
            assert "<h1>notes</h1>" in body and "<em>bold</em>" in body
            assert "<script>" not in body and "&lt;script&gt;" in body, "raw HTML in Markdown is escaped"


def test_artifact_route_refuses_paths_outside_the_pipeline_root(plane):
    _, url, root = plane
    base = f"{url}/dashboard/runs/default/art/artifact?"
    status, body, _ = _get(base + urllib.parse.urlencode({"uri": str(root / "train/notes")}))
    assert status == 200 and body.startswith("# notes")
    for outside in ("/etc/passwd", f"{root}/../home/kubeconfig", "file:///etc/passwd"):
        status, body, _ = _get(base + urllib.parse.urlencode({"uri": outside}))
        assert status == 403 and "outside the run's pipeline root" in body, (outside, status, body)
    status, body, _ = _get(base + urllib.parse.urlencode({"uri": "s3://bucket/x"}))
    assert status == 400
