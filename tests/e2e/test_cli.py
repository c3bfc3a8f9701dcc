"""The CLI as a person uses it: kubectl's forms, bad input, output formats."""

from __future__ import annotations

import json
import textwrap

import yaml

from tests.conftest import shared_plane

# One control plane for the file: each test names its own objects.
plane = shared_plane("cli")


GOOD = textwrap.dedent("""
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: settings
      namespace: kubeflow
    data:
      lr: "0.1"
""")

BAD_SECOND_DOC = GOOD + textwrap.dedent("""
    ---
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    metadata:
      name: bad
      namespace: kubeflow
    spec:
      pytorchReplicaSpecs:
        Worker:
          replicas: -1
          template:
            spec:
              containers: [{name: pytorch, image: x, command: [python]}]
""")


def test_bad_manifest_is_rejected_whole(plane, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_SECOND_DOC.replace("settings", "rejected-whole"))
    proc = plane.cli("apply", "-f", str(path), check=False)
    assert proc.returncode != 0
    assert "bad.yaml" in proc.stderr and "document 2" in proc.stderr
    assert "replicas" in proc.stderr
    assert plane.cli("get", "cm", "rejected-whole", "-n", "kubeflow", check=False).returncode != 0


def test_malformed_yaml_names_the_line(plane, tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x\n")
    proc = plane.cli("apply", "-f", str(path), check=False)
    assert proc.returncode != 0 and "broken.yaml" in proc.stderr and "line" in proc.stderr


def test_unknown_kind_is_an_error(plane, tmp_path):
    path = tmp_path / "unknown.yaml"
    path.write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    proc = plane.cli("apply", "-f", str(path), check=False)
    assert proc.returncode != 0 and "Widget" in proc.stderr


def test_apply_get_describe_delete_round_trip(plane, tmp_path):
    # A namespace of its own, so that its list holds only this test's configmap.
    manifest = GOOD.replace("kubeflow", "round-trip")
    path = tmp_path / "cm.yaml"
    path.write_text(manifest)
    assert "configmap/settings created" in plane.cli("apply", "-f", str(path)).stdout
    assert "configmap/settings unchanged" in plane.cli("apply", "-f", str(path)).stdout
    path.write_text(manifest.replace('"0.1"', '"0.2"'))
    assert "configmap/settings configured" in plane.cli("apply", "-f", str(path)).stdout
    as_json = json.loads(plane.cli("get", "configmap/settings", "-n", "round-trip", "-o", "json").stdout)
    assert as_json["data"]["lr"] == "0.2"
    assert as_json["metadata"]["generation"] == 2
    as_yaml = yaml.safe_load(plane.cli("get", "cm", "-n", "round-trip", "-o", "yaml").stdout)
    assert as_yaml["kind"] == "List" and as_yaml["items"][0]["metadata"]["name"] == "settings"
    assert "kubeflow" in plane.cli("get", "namespaces").stdout
    assert "settings" in plane.cli("describe", "cm", "settings", "-n", "round-trip").stdout
    plane.cli("delete", "cm/settings", "-n", "round-trip")
    assert plane.cli("get", "cm", "settings", "-n", "round-trip", check=False).returncode != 0


def test_apply_from_stdin_and_directory(plane, tmp_path):
    plane.cli("apply", "-f", "-", input=GOOD.replace("settings", "from-stdin"))
    d = tmp_path / "dir"
    d.mkdir()
    (d / "a.yaml").write_text(GOOD.replace("settings", "a"))
    (d / "b.json").write_text(json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                                          "metadata": {"name": "b", "namespace": "kubeflow"}}))
    out = plane.cli("apply", "-f", str(d)).stdout
    assert "configmap/a created" in out and "configmap/b created" in out
    names = plane.cli("get", "cm", "-n", "kubeflow").stdout
    assert all(n in names for n in ("from-stdin", "a", "b"))


def test_wait_times_out_with_an_error(plane, tmp_path):
    path = tmp_path / "cm.yaml"
    path.write_text(GOOD.replace("settings", "never-ready"))
    plane.cli("apply", "-f", str(path))
    proc = plane.cli("wait", "cm/never-ready", "-n", "kubeflow", "--for=condition=Ready", "--timeout=1s", check=False)
    assert proc.returncode != 0 and "timed out" in proc.stderr


def test_wait_sees_a_change_made_while_it_waits(plane):
    """``wait`` follows a watch: a deletion made after it started ends it at once, with success."""
    import subprocess
    import sys

    from tests.helpers import REPO

    plane.cli("apply", "-f", "-", input=GOOD.replace("settings", "watched"))

    def start(*args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "trimaran.cli", "wait", *args, "-n", "kubeflow"],
                                env=plane.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    deleted = start("configmap/watched", "--for=delete", "--timeout=60s")
    timed_out = start("cm", "watched", "--for", "delete", "--timeout=500ms")
    assert timed_out.wait(timeout=60) == 1 and "timed out" in timed_out.stderr.read()
    assert deleted.poll() is None, "the wait ended before the object was deleted"
    plane.cli("delete", "cm", "watched", "-n", "kubeflow")
    assert deleted.wait(timeout=60) == 0
    assert deleted.stdout.read().strip() == "configmap/watched deleted"


def test_wait_takes_several_objects_a_selector_or_a_jsonpath_and_get_prints_a_jsonpath(plane):
    import subprocess
    import sys

    from tests.helpers import REPO

    def config_map(name: str, ready: str) -> str:
        return textwrap.dedent(f"""
            apiVersion: v1
            kind: ConfigMap
            metadata: {{name: {name}, namespace: kubeflow, labels: {{group: waited}}}}
            data: {{lr: "0.1", ready: "{ready}"}}
        """)

    for name in ("w-a", "w-b"):
        plane.cli("apply", "-f", "-", input=config_map(name, "no"))
    met = plane.cli("wait", "cm/w-a", "configmap/w-b", "-n", "kubeflow", "--for=jsonpath={.data.lr}=0.1")
    assert met.stdout.splitlines() == ["configmap/w-a condition met", "configmap/w-b condition met"]

    waiting = subprocess.Popen(
        [sys.executable, "-m", "trimaran.cli", "wait", "cm", "-l", "group=waited", "-n", "kubeflow",
         "--for=jsonpath={.data.ready}=yes", "--timeout=60s"],
        env=plane.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    plane.cli("apply", "-f", "-", input=config_map("w-b", "yes"))
    assert waiting.poll() is None, "w-a is not ready yet"
    plane.cli("apply", "-f", "-", input=config_map("w-a", "yes"))
    assert waiting.wait(timeout=60) == 0, waiting.stderr.read()
    assert sorted(waiting.stdout.read().splitlines()) == ["configmap/w-a condition met", "configmap/w-b condition met"]

    mixed = plane.cli("wait", "cm/w-a", "w-b", "-n", "kubeflow", "--for=delete", check=False)
    assert mixed.returncode == 1 and "KIND/NAME form" in mixed.stderr
    none = plane.cli("wait", "cm", "-l", "group=nobody", "-n", "kubeflow", "--for=delete", check=False)
    assert none.returncode == 1 and "no matching resources found" in none.stderr

    names = plane.cli("get", "cm", "-l", "group=waited", "-n", "kubeflow",
                      "-o", 'jsonpath={range .items[*]}{.metadata.name}={.data.ready}{"\\n"}{end}').stdout
    assert names == "w-a=yes\nw-b=yes\n"
    assert plane.cli("get", "cm/w-a", "-n", "kubeflow", "-o", "jsonpath={.metadata.labels}").stdout == \
        '{"group":"waited"}'
    bad = plane.cli("get", "cm/w-a", "-n", "kubeflow", "-o", "jsonpath={range .data}", check=False)
    assert bad.returncode == 1 and "without {end}" in bad.stderr


def test_unknown_fields_warn_and_the_rest_is_stored(plane, tmp_path):
    path = tmp_path / "cm.yaml"
    path.write_text(GOOD.replace("settings", "tinted").replace("\ndata:", "\ncolour: blue\ndata:"))
    proc = plane.cli("apply", "-f", str(path))
    assert 'unknown field "colour"' in proc.stderr and "configmap/tinted created" in proc.stdout
    assert "colour" not in plane.cli("get", "cm", "tinted", "-n", "kubeflow", "-o", "yaml").stdout


def test_events_of_a_recreated_job_start_fresh(plane, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent("""
        apiVersion: kubeflow.org/v1
        kind: PyTorchJob
        metadata: {name: again}
        spec:
          pytorchReplicaSpecs:
            Master:
              template: {spec: {containers: [{name: pytorch, image: x, command: [python, -c, "print('hi')"]}]}}
    """))
    for _ in range(2):
        plane.cli("apply", "-f", str(path))
        plane.cli("wait", "pytorchjob/again", "--for=condition=Succeeded", "--timeout=60s")
        events = plane.client().events("PyTorchJob", "default", "again")
        created = [e for e in events if e["reason"] == "PyTorchJobCreated"]
        assert len(created) == 1 and created[0]["count"] == 1, events
        assert "hi" in plane.cli("logs", "again", "-f").stdout
        plane.cli("delete", "pytorchjob", "again")


def test_server_stop_with_pods_leaves_no_process(fresh_plane, tmp_path):
    plane = fresh_plane
    from tests.helpers import poll

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "long"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "main", "image": "x", "command": ["python", "-c", "import time; time.sleep(600)"]}]}}}}
    path = tmp_path / "long.json"
    path.write_text(json.dumps(job))
    plane.cli("apply", "-f", str(path))
    poll(lambda: plane.pod_processes(), timeout=60, what="the job's processes")
    out = plane.cli("server", "stop", "--pods").stdout
    assert "control plane stopped" in out and "stopped 1 pod" in out
    assert plane.pod_processes() == []


def test_trials_say_why_a_trial_did_not_succeed(plane, tmp_path):
    import csv
    import io

    script = "import sys\nif float(sys.argv[1]) < 0.5: sys.exit('boom')\nprint('score=0.7')"
    command = ["python", "-c", script, "${trialParameters.level}"]
    exp = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "why"}, "spec": {
        "objective": {"type": "maximize", "objectiveMetricName": "score"}, "algorithm": {"algorithmName": "grid"},
        "parallelTrialCount": 2, "maxTrialCount": 2,
        "parameters": [{"name": "level", "parameterType": "categorical", "feasibleSpace": {"list": ["0.7", "0.2"]}}],
        "trialTemplate": {
            "primaryContainerName": "main", "trialParameters": [{"name": "level", "reference": "level"}],
            "trialSpec": {"apiVersion": "batch/v1", "kind": "Job", "spec": {"backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "x", "command": command}]}}}},
        }}}
    path = tmp_path / "why.json"
    path.write_text(json.dumps(exp))
    plane.cli("apply", "-f", str(path))
    plane.cli("wait", "experiment/why", "--for=condition=Succeeded", "--timeout=60s")
    rows = json.loads(plane.cli("trials", "why", "-o", "json").stdout)
    by_status = {r["status"]: r for r in rows}
    assert set(by_status) == {"Succeeded", "Failed"}
    assert by_status["Succeeded"]["message"] is None
    failed = by_status["Failed"]["message"]
    assert failed and failed.rstrip().endswith("boom"), "the condition's whole message, its log tail included"
    csv_rows = {r["status"]: r for r in csv.DictReader(io.StringIO(plane.cli("trials", "why", "-o", "csv").stdout))}
    assert csv_rows["Failed"]["message"] == failed and csv_rows["Succeeded"]["message"] == ""
    assert "message" in plane.cli("trials", "why").stdout


def test_get_prints_the_servers_columns_in_every_form(plane, tmp_path):
    for ns in ("kubeflow", "team-a"):
        plane.cli("apply", "-f", "-", input=GOOD.replace("kubeflow", ns).replace("settings", "columns"))
    rows = [line.split() for line in plane.cli("get", "cm", "-A").stdout.splitlines()]
    assert rows[0] == ["NAMESPACE", "NAME", "DATA", "AGE"]
    assert [r[:3] for r in rows[1:] if r[1] == "columns"] == [["kubeflow", "columns", "1"],
                                                             ["team-a", "columns", "1"]]
    assert plane.cli("get", "cm", "-n", "team-a", "-o", "name").stdout.split() == ["configmap/columns"]
    # The connection flags go before the verb, as for kubectl.
    kubeconfig = str(plane.home / "kubeconfig")
    named = plane.cli("--kubeconfig", kubeconfig, "get", "cm/columns", "-n", "team-a").stdout.splitlines()
    assert named[0].split() == ["NAME", "DATA", "AGE"] and named[1].split()[:2] == ["columns", "1"]
    missing = plane.cli("get", "cm", "nothere", "-n", "team-a", check=False)
    assert missing.returncode == 1 and 'configmaps "nothere" not found' in missing.stderr
    typo = plane.cli("get", "configmapz", check=False)
    assert typo.returncode == 1 and 'did you mean "configmap' in typo.stderr
    assert "--all-namespaces" in plane.cli("get", "--help").stdout


PRIVILEGED_NAMESPACE_AND_HOSTPATH_JOB = textwrap.dedent("""
    apiVersion: v1
    kind: Namespace
    metadata:
      name: {ns}
      labels: {{pod-security.kubernetes.io/enforce: privileged}}
    ---
    apiVersion: batch/v1
    kind: Job
    metadata: {{name: {job}, namespace: {ns}}}
    spec:
      suspend: true
      template:
        spec:
          restartPolicy: Never
          volumes: [{{name: host, hostPath: {{path: {host}}}}}]
          containers: [{{name: main, image: python, command: ["true"],
                         volumeMounts: [{{name: host, mountPath: /host}}]}}]
""")


def test_a_namespace_in_the_same_file_is_applied_first_and_undone_with_the_rest(plane, tmp_path):
    ok = PRIVILEGED_NAMESPACE_AND_HOSTPATH_JOB.format(ns="lab", job="mount", host=tmp_path)
    out = plane.cli("apply", "-f", "-", input=ok).stdout
    assert "namespace/lab created" in out and "job.batch/mount created" in out
    # A file whose job is refused leaves no namespace behind either.
    bad = PRIVILEGED_NAMESPACE_AND_HOSTPATH_JOB.format(ns="lab2", job="Bad_Name", host=tmp_path)
    assert plane.cli("apply", "-f", "-", input=bad, check=False).returncode != 0
    assert plane.cli("get", "namespace", "lab2", check=False).returncode != 0
