"""The web dashboard, as a browser reads it from a real control plane: an experiment's trials and
curves, why early-stopped trials stopped, a trial's log, escaping, and the token."""

from __future__ import annotations

import http.client
import json
import os
import re
import ssl
import textwrap
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, _stop_everything
from tests.helpers import REPO

EVIL = "<script>alert('x')</script>"
# A curve whose level is the trial's `level`; the poor trials are stopped by the median rule.
CURVE = textwrap.dedent("""
    import sys, time
    level = float(sys.argv[1])
    print("hello <script>alert('x')</script>", flush=True)
    for step in range(6):
        print(f"step={step} score={level * (1 - 0.5 ** (step + 1)):.4f}", flush=True)
        time.sleep(0.1)
""")


def _experiment(name: str) -> dict:
    return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": name}, "spec": {
        "objective": {"type": "maximize", "objectiveMetricName": "score"},
        # Without random_state the grid is walked in list order, one trial at a time: the good trials
        # finish first and the poor ones are measured against their median.
        "algorithm": {"algorithmName": "grid"},
        "earlyStopping": {"algorithmName": "medianstop",
                          "algorithmSettings": [{"name": "min_trials_required", "value": "2"},
                                                {"name": "start_step", "value": "2"}]},
        "parallelTrialCount": 1, "maxTrialCount": 4,
        "parameters": [{"name": "level", "parameterType": "categorical",
                        "feasibleSpace": {"list": ["0.9", "0.8", "0.1", "0.05"]}},
                       {"name": "tag", "parameterType": "categorical", "feasibleSpace": {"list": [EVIL]}}],
        "trialTemplate": {
            "primaryContainerName": "main", "retain": True,
            "trialParameters": [{"name": "level", "reference": "level"}],
            "trialSpec": {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "x",
                                "command": ["python", "-c", CURVE, "${trialParameters.level}"]}]}}}},
        },
    }}


def _start(home: Path, host: str = "127.0.0.1") -> tuple[ControlPlaneHandle, dict]:
    from trimaran.server.daemon import start_server

    env = dict(os.environ, TRIMARAN_HOME=str(home), PYTHONPATH=str(REPO))
    info = start_server(host=host, home=home)
    plane = ControlPlaneHandle(home=home, env=env)
    url, token, context = plane.endpoint()
    _ENDPOINTS[urllib.parse.urlsplit(url).port] = (token, context)
    return plane, {**info, "token": token}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlaneHandle, str]]:
    """A control plane that has run the median-stopped experiment to the end; yields it and its URL."""
    home = tmp_path_factory.mktemp("dashboard") / "home"
    plane, info = _start(home)
    try:
        path = home.parent / "median.json"
        path.write_text(json.dumps(_experiment("median")))
        plane.cli("apply", "-f", str(path))
        plane.cli("wait", "experiment/median", "--for=condition=Succeeded", "--timeout=120s")
        yield plane, info["url"]
    finally:
        _stop_everything(home)


# The token and the CA of each control plane a test started, by its URL's port.
_ENDPOINTS: dict[int, tuple[str, ssl.SSLContext]] = {}


def _get(url: str, headers: dict[str, str] | None = None, token: bool = True) -> tuple[int, str, dict[str, str]]:
    """One request, redirects not followed; with the control plane's token unless ``token`` is False."""
    parts = urllib.parse.urlsplit(url)
    bearer, context = _ENDPOINTS[parts.port]
    if token and headers is None:
        headers = {"Authorization": f"Bearer {bearer}"}
    conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=10, context=context)
    try:
        conn.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(), {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def _page(url: str) -> str:
    status, body, headers = _get(url)
    assert status == 200, (status, body[:500])
    assert headers["content-type"].startswith("text/html")
    assert "<script" not in body, "no page carries a script, nor lets a stored string become one"
    return body


def _trials(plane: ControlPlaneHandle) -> list[dict]:
    return plane.client().list("Trial", "default", "katib.kubeflow.org/experiment=median")


def _state(obj: dict) -> str:
    true = [c["type"] for c in (obj.get("status") or {}).get("conditions") or [] if c["status"] == "True"]
    return true[-1] if true else ""


def test_experiment_page_shows_every_trial_curve_the_best_and_why_trials_stopped(finished):
    plane, url = finished
    trials = _trials(plane)
    exp = plane.get("experiment", "median")
    best = exp["status"]["currentOptimalTrial"]["bestTrialName"]
    stopped = [t for t in trials if _state(t) == "EarlyStopped"]
    assert len(trials) == 4 and stopped

    page = _page(f"{url}/dashboard/experiments/default/median")
    assert "medianstop" in page and "grid" in page and "maximize score" in page
    for t in trials:
        name = t["metadata"]["name"]
        assert f'href="/dashboard/trials/default/{name}"' in page
        assert re.search(rf'<g class="series \w+" data-series="{name}"><title>{name}</title><polyline ', page), name
    assert f'<g class="series best" data-series="{best}">' in page
    assert re.search(rf'<tr class="best"><td>★ <a href="/dashboard/trials/default/{best}">', page)
    for t in stopped:
        name = t["metadata"]["name"]
        assert f'<g class="series stopped" data-series="{name}">' in page
        message = [c for c in t["status"]["conditions"] if c["type"] == "EarlyStopped"][0]["message"]
        assert "median" in message
        row = re.search(rf'<tr[^>]*><td>(★ )?<a href="/dashboard/trials/default/{name}">.*?</tr>', page).group(0)
        assert "TrialEarlyStopped" in row and _escaped(message) in row
    assert page.count('class="stop-marker"') == len(stopped)
    assert "Best score so far, by trial" in page and 'data-series="best so far"' in page
    # The table is sorted best first: the best trial's row comes before every other trial's.
    rows = re.findall(r'<td>(?:★ )?<a href="/dashboard/trials/default/([^"]+)">', page)
    assert rows[0] == best and sorted(rows) == sorted(t["metadata"]["name"] for t in trials)


def _escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_user_strings_are_escaped(finished):
    plane, url = finished
    page = _page(f"{url}/dashboard/experiments/default/median")
    assert _escaped(EVIL) in page, "the parameter value is shown, as text"
    best = plane.get("experiment", "median")["status"]["currentOptimalTrial"]["bestTrialName"]
    trial = _page(f"{url}/dashboard/trials/default/{best}")
    assert "hello &lt;script&gt;" in trial, "the log line is shown, as text"
    status, body, _ = _get(f"{url}/dashboard/experiments/default/{urllib.parse.quote('<script>')}")
    assert status == 404 and "&lt;script&gt;" in body and "<script>" not in body


def test_trial_page_shows_its_curve_conditions_and_log_tail(finished):
    plane, url = finished
    best = plane.get("experiment", "median")["status"]["currentOptimalTrial"]["bestTrialName"]
    page = _page(f"{url}/dashboard/trials/default/{best}")
    assert f'<g class="series other" data-series="{best}"><title>{best}</title><polyline ' in page
    assert "TrialSucceeded" in page and "level" in page
    assert "step=5 score=" in page, "the retained pod's log tail"
    assert 'http-equiv="refresh"' not in page, "a finished trial's page does not reload itself"
    stopped = next(t for t in _trials(plane) if _state(t) == "EarlyStopped")["metadata"]["name"]
    page = _page(f"{url}/dashboard/trials/default/{stopped}")
    assert "Why it stopped" in page and "median" in page and 'class="stop-marker"' in page


def test_overview_lists_every_kind_and_links_to_detail_pages(finished):
    plane, url = finished
    status, _, headers = _get(url + "/")
    assert status == 307 and headers["location"] == "/dashboard/"
    page = _page(f"{url}/dashboard/")
    assert 'href="/dashboard/experiments/default/median">median</a>' in page
    assert "Succeeded" in page and "<h2>Pods</h2>" in page and "<h2>InferenceServices</h2>" in page
    assert 'http-equiv="refresh"' not in page, "nothing runs, so the overview stays still"
    job = re.search(r'href="(/dashboard/jobs/Job/default/[^"]+)"', page).group(1)
    job_page = _page(url + job)
    assert "Complete" in job_page and "<h2>Events</h2>" in job_page
    pod = re.search(r'href="(/dashboard/pods/default/[^"#]+)#log"', job_page).group(1)
    assert "step=5 score=" in _page(url + pod)


def test_dashboard_command_prints_the_url(finished):
    plane, url = finished
    _, token, _ = plane.endpoint()
    assert plane.cli("dashboard").stdout.strip() == f"{url}/dashboard/?{urllib.parse.urlencode({'token': token})}"


def test_running_experiment_page_refreshes_itself(finished, tmp_path):
    plane, url = finished
    slow = _experiment("slow")
    del slow["spec"]["earlyStopping"]
    slow["spec"]["maxTrialCount"] = 1
    container = slow["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["python", "-c", "import time; print('step=0 score=1', flush=True); "
                            "time.sleep(60)", "${trialParameters.level}"]
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(slow))
    plane.cli("apply", "-f", str(path))
    try:
        assert 'http-equiv="refresh" content="2"' in _page(f"{url}/dashboard/experiments/default/slow")
        assert 'http-equiv="refresh"' in _page(f"{url}/dashboard/")
    finally:
        plane.cli("delete", "experiment", "slow")


def test_multi_objective_experiment_shows_its_pareto_front(finished, tmp_path):
    plane, url = finished
    pareto = _experiment("pareto")
    spec = pareto["spec"]
    del spec["earlyStopping"]
    spec.update({"objective": {"type": "maximize", "objectiveMetricName": "accuracy",
                               "additionalMetricNames": ["cost"]},
                 "algorithm": {"algorithmName": "nsga2", "algorithmSettings": [
                     {"name": "random_state", "value": "3"},
                     {"name": "objective_types", "value": "maximize,minimize"}]},
                 "parameters": [{"name": "level", "parameterType": "double",
                                 "feasibleSpace": {"min": "0.1", "max": "0.9"}}],
                 "parallelTrialCount": 4, "maxTrialCount": 4})
    script = "import sys; v = float(sys.argv[1]); print(f'accuracy={v:.4f} cost={(v - 0.5) ** 2 + 0.1:.4f}')"
    container = spec["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["python", "-c", script, "${trialParameters.level}"]
    path = tmp_path / "pareto.json"
    path.write_text(json.dumps(pareto))
    plane.cli("apply", "-f", str(path))
    plane.cli("wait", "experiment/pareto", "--for=condition=Succeeded", "--timeout=120s")
    front = plane.get("experiment", "pareto")["status"]["paretoOptimalTrials"]
    page = _page(f"{url}/dashboard/experiments/default/pareto")
    assert "Pareto front: accuracy against cost" in page
    chart = re.search(r'<g class="series front" data-series="Pareto front">.*?</g>', page).group(0)
    assert front and chart.count("<circle") == len(front)
    pareto_column = re.findall(r"<td>(yes|)</td><td></td><td>\d+s</td></tr>", page)
    assert pareto_column.count("yes") == len(front)
    assert "cost</a>" in page, "a link selects the additional metric's curves"
    assert "<h2>cost by step, every trial</h2>" in _page(f"{url}/dashboard/experiments/default/pareto?metric=cost")


def test_training_job_and_inference_service_pages(finished, tmp_path):
    from tests.e2e.test_serving import constant_model, isvc_manifest, wait_ready

    plane, url = finished
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ddp"},
           "spec": {"pytorchReplicaSpecs": {"Master": {"template": {"spec": {"containers": [
               {"name": "pytorch", "image": "x", "command": ["python", "-c", f"print({EVIL!r})"]}]}}}}}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    (tmp_path / "isvc.json").write_text(isvc_manifest("digits", str(constant_model(tmp_path / "models/7", 7))))
    plane.cli("apply", "-f", str(tmp_path / "job.json"), "-f", str(tmp_path / "isvc.json"))
    plane.cli("wait", "pytorchjob/ddp", "--for=condition=Succeeded", "--timeout=60s")
    page = _page(f"{url}/dashboard/jobs/PyTorchJob/default/ddp")
    assert "<h2>Replicas</h2>" in page and "<td>Master</td>" in page and "PyTorchJobSucceeded" in page
    pod = re.search(r'href="(/dashboard/pods/default/ddp-master-0)#log"', page).group(1)
    assert _escaped(EVIL) in _page(url + pod)

    obj = wait_ready(plane, "digits")
    page = _page(f"{url}/dashboard/inferenceservices/default/digits")
    assert _escaped(obj["status"]["url"]) in page and "Predictor traffic" in page
    assert "<td>digits-predictor-00001</td><td>100%</td>" in page
    assert 'http-equiv="refresh"' not in page, "a ready service's page stays still"
    overview = _page(f"{url}/dashboard/")
    assert 'href="/dashboard/inferenceservices/default/digits">digits</a>' in overview
    assert 'href="/dashboard/jobs/PyTorchJob/default/ddp">ddp</a>' in overview
    assert _get(f"{url}/dashboard/jobs/Pod/default/ddp-master-0")[0] == 404
    plane.cli("delete", "isvc", "digits")


def test_token_guards_the_dashboard_as_it_guards_the_api(tmp_path):
    from trimaran.server.daemon import stop_server

    home = tmp_path / "home"
    # 127.0.0.2 is this machine but not the default address: the server requires its token.
    plane, info = _start(home, host="127.0.0.2")
    try:
        url, token = info["url"], info["token"]
        assert token
        page = f"{url}/dashboard/"
        assert _get(page, token=False)[0] == 401
        assert _get(page, {"Authorization": "Bearer wrong"})[0] == 401
        assert _get(page, {"Authorization": f"Bearer {token}"})[0] == 200
        assert _get(f"{page}?token=wrong", token=False)[0] == 401

        status, _, headers = _get(f"{page}?token={urllib.parse.quote(token)}", token=False)
        assert status == 303 and headers["location"] == "/dashboard/"
        cookie = headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        name_value = cookie.split(";", 1)[0]
        assert _get(page, {"Cookie": name_value})[0] == 200
        assert _get(f"{url}/dashboard/experiments/default/none", {"Cookie": name_value})[0] == 404
        assert _get(page, {"Cookie": name_value.split("=", 1)[0] + "=wrong"})[0] == 401
        # The cookie opens the dashboard only; the API still wants the bearer token.
        assert _get(f"{url}/api/v1/pods", {"Cookie": name_value})[0] == 401
        # The root only redirects, keeping the query, so a link to it signs in as well.
        status, _, headers = _get(f"{url}/?token={urllib.parse.quote(token)}", token=False)
        assert status == 307 and headers["location"] == f"/dashboard/?token={urllib.parse.quote(token)}"

        printed = plane.cli("dashboard").stdout.strip()
        assert printed == f"{url}/dashboard/?{urllib.parse.urlencode({'token': token})}"
        assert _get(f"{url}/api/v1/pods", token=False)[0] == 401
    finally:
        stop_server(home)
