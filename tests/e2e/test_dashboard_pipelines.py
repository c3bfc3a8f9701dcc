"""Pipeline runs in the dashboard, as a browser reads them from a real control plane: the runs list,
a run's graph, its tasks' parameters, Metrics and ClassificationMetrics as tables, HTML and Markdown
artifacts in a sandboxed frame, a task's log, and an artifact route that serves nothing outside the
run's pipeline root. The run is the corpus' ``artifacts`` pipeline, run by the Run controller; the
graphs of loops and conditions are drawn from kfp-compiled specs.
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
from tests.pipelines.kfp_corpus import compiled
from trimaran.server.dashboard.dag import build, svg


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlaneHandle, str, Path]]:
    with module_plane(tmp_path_factory, "dashboard-pipelines") as handle:
        url, token, context = handle.endpoint()
        _ENDPOINTS[urllib.parse.urlsplit(url).port] = (token, context)
        out = handle.cli("run", "-f", str(compiled("artifacts").path), "-p", "rows=5", "--name", "art",
                         "--experiment", "demo", "--wait").stdout
        assert "run/art SUCCEEDED" in out, out
        root = handle.client().get("Run", "default", "art")["status"]["pipelineRoot"]
        yield handle, url, Path(root)


def test_runs_list_shows_state_duration_and_experiment(plane):
    _, url, _ = plane
    page = _page(f"{url}/dashboard/runs")
    row = re.search(r'<tr><td>default</td><td><a href="/dashboard/runs/default/art">art</a>.*?</tr>', page).group(0)
    assert "SUCCEEDED" in row and "demo" in row and "<td>2/2</td>" in row and re.search(r"<td>\d+s</td>", row)
    overview = _page(f"{url}/dashboard/")
    assert 'href="/dashboard/runs"' in overview, "every page links to the runs"
    assert '<h2>Runs</h2>' in overview and 'href="/dashboard/runs/default/art">art</a>' in overview


def test_run_page_draws_the_graph_and_each_task(plane):
    _, url, _ = plane
    page = _page(f"{url}/dashboard/runs/default/art")
    assert '<g class="task state-SUCCEEDED" data-task="train">' in page
    assert '<g class="task state-SUCCEEDED" data-task="evaluate">' in page
    assert '<path class="edge" data-from="train" data-to="evaluate"' in page, "evaluate reads train's outputs"
    assert 'href="#task-train"' in page and '<section id="task-train" class="task">' in page
    assert "Wrote executor output file" in page, "the train pod's log tail"
    assert "<td>rows</td><td>5</td>" in page and "<td>raw</td><td>raw text</td>" in page
    # Metrics as a table, the confusion matrix as one, the ROC as a chart.
    assert "<td>accuracy</td><td>0.75</td>" in page
    assert re.search(r'<table class="confusion-matrix">.*<th>a</th><td>3</td><td>1</td>.*<th>b</th><td>0</td>'
                     r"<td>4</td>", page)
    assert 'data-series="ROC"' in page
    assert 'http-equiv="refresh"' not in page, "a finished run's page stays still"


def test_graph_of_a_run_not_started_shows_conditions_from_the_pipeline():
    spec = compiled("conditions").pipeline_spec
    drawn = svg(build(spec, []), lambda task_id: f"#{task_id}")
    groups = re.findall(r'<g class="group condition state-PENDING" data-task="([^"]+)">', drawn)
    assert len(groups) >= 4 and any("." in g for g in groups), "conditions, one inside another"
    condition = html.escape("if inputs.parameter_values['pipelinechannel--flip'] == 'heads'")
    assert f": {condition} (PENDING)</title>" in drawn, "a condition's whole expression in its tooltip"
    assert '<g class="task state-PENDING" data-task="number">' in drawn
    assert re.search(r'<path class="edge" data-from="number" data-to="condition-\d+"', drawn)


def test_html_and_markdown_artifacts_are_sandboxed(plane):
    _, url, _ = plane
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
        else:
            assert body == "<h1>report</h1><script>alert(1)</script>", "the page's policy keeps it from running"


def test_artifact_route_refuses_paths_outside_the_pipeline_root(plane):
    handle, url, root = plane
    base = f"{url}/dashboard/runs/default/art/artifact?"
    status, body, _ = _get(base + urllib.parse.urlencode({"uri": str(root / "train/notes")}))
    assert status == 200 and body.startswith("# notes")
    other_run = root.parent / "other-run"
    other_run.mkdir(exist_ok=True)
    for outside in ("/etc/passwd", f"{root}/../../../../kubeconfig", "file:///etc/passwd", str(other_run)):
        status, body, _ = _get(base + urllib.parse.urlencode({"uri": outside}))
        assert status == 403 and "outside the run's pipeline root" in body, (outside, status, body)
    status, body, _ = _get(base + urllib.parse.urlencode({"uri": "s3://bucket/x"}))
    assert status == 400


def test_markdown_is_rendered_with_raw_html_escaped(plane):
    _, url, root = plane
    page = root / "train" / "raw.md"
    page.write_text("# title\n<script>alert(1)</script>\n[x](javascript:alert(1))\n")
    status, body, _ = _get(f"{url}/dashboard/runs/default/art/artifact?"
                           + urllib.parse.urlencode({"uri": str(page), "render": "markdown"}))
    assert status == 200 and "<h1>title</h1>" in body
    assert "<script>" not in body and "&lt;script&gt;" in body and 'href="javascript:' not in body


def test_a_loops_iterations_are_boxes_in_its_box_in_rows():
    """The graph of a fan-out of six as the Run controller reports it (a loop, its iterations, a step
    in each): the tasks list is written here, the spec is kfp's."""
    tasks = [{"id": "source", "name": "source", "state": "SUCCEEDED"},
             {"id": "for-loop-1", "name": "for-loop-1", "type": "loop", "component": "comp-for-loop-1",
              "state": "RUNNING"}]
    for i in range(6):
        tasks += [{"id": f"for-loop-1.iteration-{i}", "name": f"iteration-{i}", "type": "iteration", "iteration": i,
                   "parent": "for-loop-1", "component": "comp-for-loop-1", "state": "RUNNING"},
                  {"id": f"for-loop-1.iteration-{i}.work", "name": "work", "parent": f"for-loop-1.iteration-{i}",
                   "state": "SUCCEEDED" if i < 5 else "RUNNING"}]
    drawn = svg(build(compiled("fanout").pipeline_spec, tasks), lambda task_id: f"#{task_id}")
    assert re.search(r'<g class="group loop state-RUNNING" data-task="for-loop-1"><title>for-loop-1: loop for-loop-1 '
                     r'\(6 iterations\) \(RUNNING\)</title>', drawn)
    assert drawn.count('<g class="group iteration') == 6 and drawn.count('class="task state-SUCCEEDED"') == 6
    assert '<g class="task state-RUNNING" data-task="for-loop-1.iteration-5.work">' in drawn
    assert '<g class="task state-PENDING" data-task="gather">' in drawn, "what the controller has not reached"
    for edge in (("source", "for-loop-1"), ("for-loop-1", "gather")):
        assert f'<path class="edge" data-from="{edge[0]}" data-to="{edge[1]}"' in drawn
    tops = sorted({float(y) for y in re.findall(r'data-task="for-loop-1\.iteration-\d"><title>[^<]*</title><rect '
                                                r'x="[\d.]+" y="([\d.]+)"', drawn)})
    assert len(tops) == 2, "six iterations in two rows"
