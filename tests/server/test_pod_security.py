"""Pod Security Admission and the apply-time refusals, against a real control plane.

The server's default level for unlabelled namespaces is baseline; namespaces choose their own with
the ``pod-security.kubernetes.io/*`` labels. Refusals are kube-apiserver's Status objects in its
words, and a refused object is not stored.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ControlPlaneHandle
from tests.helpers import poll
from trimaran.server.kubeconfig import kubeconfig_path, read_endpoint

LABEL = "pod-security.kubernetes.io/"


def _client(home: Path) -> httpx.Client:
    endpoint = read_endpoint(kubeconfig_path(home))
    context = ssl.create_default_context(cadata=(endpoint.ca_pem or b"").decode())
    return httpx.Client(base_url=endpoint.server, verify=context, timeout=30,
                        headers={"Authorization": f"Bearer {endpoint.token}"})


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One control plane with the default level for the module; each test uses namespaces of its own."""
    from trimaran.server.daemon import start_server, stop_pods, stop_server

    home = tmp_path_factory.mktemp("pod-security") / "home"
    start_server(home=home)
    try:
        yield home
    finally:
        stop_server(home)
        stop_pods(home, grace_seconds=1.0)


@pytest.fixture
def api(home: Path) -> Iterator[httpx.Client]:
    with _client(home) as client:
        yield client


def namespace(api: httpx.Client, name: str, **levels: str) -> None:
    labels = {LABEL + mode.replace("_", "-"): level for mode, level in levels.items()}
    response = api.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": name, "labels": labels}})
    assert response.status_code == 201, response.text


def pod(name: str, *, privileged: bool = False, host_path: bool = False, container_name: str = "c", **spec: Any
        ) -> dict[str, Any]:
    container: dict[str, Any] = {"name": container_name, "image": "python:3.11", "command": ["true"]}
    if privileged:
        container["securityContext"] = {"privileged": True}
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                           "spec": {"containers": [container], "restartPolicy": "Never", **spec}}
    if host_path:
        out["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": "/"}}]
        container["volumeMounts"] = [{"name": "data", "mountPath": "/host"}]
    return out


def pytorchjob(name: str, worker: dict[str, Any]) -> dict[str, Any]:
    # Suspended: admitted and stored like any job, but no pod is started for it.
    master = {"containers": [{"name": "pytorch", "image": "python:3.11", "command": ["true"]}]}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": master}},
                "Worker": {"replicas": 1, "template": {"spec": worker}}}}}


def refused(response: httpx.Response, code: int, reason: str) -> dict[str, Any]:
    assert response.status_code == code, response.text
    status = response.json()
    assert status["kind"] == "Status" and status["reason"] == reason, status
    return status


def absent(api: httpx.Client, path: str) -> None:
    assert api.get(path).status_code == 404


def test_baseline_by_default_refuses_host_paths_and_privileged_pods_in_upstreams_words(api: httpx.Client) -> None:
    status = refused(api.post("/api/v1/namespaces/default/pods", json=pod("x", privileged=True, host_path=True)),
                     403, "Forbidden")
    assert status["message"] == (
        'pods "x" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume "data"), '
        'privileged (container "c" must not set securityContext.privileged=true)')
    assert status["details"] == {"name": "x", "kind": "pods"}
    absent(api, "/api/v1/namespaces/default/pods/x")
    # A dry run is judged the same way (trimaran apply dry-runs every document first).
    refused(api.post("/api/v1/namespaces/default/pods?dryRun=All", json=pod("x", hostNetwork=True)), 403,
            "Forbidden")


def test_workload_templates_are_enforced_at_apply_with_their_field_paths(api: httpx.Client) -> None:
    worker = {"containers": [{"name": "pytorch", "image": "python:3.11", "ports": [{"containerPort": 80,
                                                                                    "hostPort": 8080}]}],
              "hostPID": True}
    status = refused(api.post("/apis/kubeflow.org/v1/namespaces/default/pytorchjobs",
                              json=pytorchjob("ddp", worker)), 403, "Forbidden")
    assert status["message"] == (
        'pytorchjobs.kubeflow.org "ddp" is forbidden: violates PodSecurity "baseline:latest": '
        'spec.pytorchReplicaSpecs.Worker.template: host namespaces (hostPID), '
        'hostPort (container "pytorch" uses hostPort 8080)')
    absent(api, "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/ddp")

    trial_job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {
        "restartPolicy": "Never", "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        "containers": [{"name": "training", "image": "python:3.11", "command": ["python", "${trialParameters.lr}"],
                        "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN"]}}}]}}}}
    experiment = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "sweep"},
                  "spec": {"objective": {"type": "minimize", "objectiveMetricName": "loss"},
                           "algorithm": {"algorithmName": "random"}, "maxTrialCount": 1, "parallelTrialCount": 1,
                           "parameters": [{"name": "lr", "parameterType": "double",
                                           "feasibleSpace": {"min": "0.1", "max": "0.2"}}],
                           "trialTemplate": {"primaryContainerName": "training", "trialSpec": trial_job,
                                             "trialParameters": [{"name": "lr", "reference": "lr"}]}}}
    status = refused(api.post("/apis/kubeflow.org/v1beta1/namespaces/default/experiments", json=experiment),
                     403, "Forbidden")
    assert status["message"].endswith(
        '"baseline:latest": spec.trialTemplate.trialSpec.spec.template: non-default capabilities (container '
        '"training" must not include "NET_ADMIN", "SYS_ADMIN" in securityContext.capabilities.add), '
        'hostPath volumes (volume "root")'), status["message"]
    absent(api, "/apis/kubeflow.org/v1beta1/namespaces/default/experiments/sweep")


def test_namespace_labels_choose_the_level_and_warn_and_audit(api: httpx.Client, home: Path) -> None:
    namespace(api, "open", enforce="privileged")
    worker = pod("w", privileged=True, host_path=True, container_name="pytorch")["spec"]
    created = api.post("/apis/kubeflow.org/v1/namespaces/open/pytorchjobs", json=pytorchjob("host", worker))
    assert created.status_code == 201, created.text

    namespace(api, "locked", enforce="restricted", enforce_version="v1.30")
    status = refused(api.post("/api/v1/namespaces/locked/pods", json=pod("plain")), 403, "Forbidden")
    assert status["message"] == (
        'pods "plain" is forbidden: violates PodSecurity "restricted:v1.30": allowPrivilegeEscalation != false '
        '(container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
        '(container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container '
        '"c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set '
        'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')
    hardened = pod("hardened", securityContext={"runAsNonRoot": True, "runAsUser": 1000,
                                                "seccompProfile": {"type": "RuntimeDefault"}})
    hardened["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": False,
                                                            "capabilities": {"drop": ["ALL"]}}
    assert api.post("/api/v1/namespaces/locked/pods?dryRun=All", json=hardened).status_code == 201

    namespace(api, "watched", warn="restricted", audit="restricted")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "plain"},
           "spec": {"suspend": True, "template": {"spec": pod("t")["spec"]}}}
    created = api.post("/apis/batch/v1/namespaces/watched/jobs", json=job)
    assert created.status_code == 201, created.text
    assert created.headers["warning"].startswith(
        '299 - "would violate PodSecurity \\"restricted:latest\\": spec.template: allowPrivilegeEscalation != false')
    poll(lambda: 'audit: jobs "plain" in namespace "watched" would violate PodSecurity "restricted:latest"'
         in (home / "server.log").read_text(), what="the audit line in server.log")


def test_bad_labels_are_refused_and_a_stricter_level_warns_about_running_pods(api: httpx.Client) -> None:
    bad = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "typo", "labels": {
        LABEL + "enforce": "strict", LABEL + "warn-version": "1.30"}}}
    status = refused(api.post("/api/v1/namespaces", json=bad), 422, "Invalid")
    assert {c["field"] for c in status["details"]["causes"]} == {
        f"metadata.labels[{LABEL}enforce]", f"metadata.labels[{LABEL}warn-version]"}
    assert "must be one of privileged, baseline, restricted" in status["message"]
    absent(api, "/api/v1/namespaces/typo")

    namespace(api, "tightened", enforce="privileged")
    # Never scheduled (no node has a thousand cores), so it stays a stored, pending pod.
    hungry = pod("hungry", host_path=True)
    hungry["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1000"}}
    assert api.post("/api/v1/namespaces/tightened/pods", json=hungry).status_code == 201
    job = pytorchjob("kept", pod("w", host_path=True, container_name="pytorch")["spec"])
    assert api.post("/apis/kubeflow.org/v1/namespaces/tightened/pytorchjobs", json=job).status_code == 201
    relabel = api.patch("/api/v1/namespaces/tightened", json={"metadata": {"labels": {LABEL + "enforce": "baseline"}}},
                        headers={"content-type": "application/merge-patch+json"})
    assert relabel.status_code == 200, relabel.text
    warning = relabel.headers["warning"]
    assert 'existing pods in namespace \\"tightened\\" violate the new PodSecurity enforce level ' \
           '\\"baseline:latest\\"' in warning and "hungry: hostPath volumes" in warning, warning
    # What exists keeps working: an edit that leaves the pod templates as they were is let through.
    labelled = api.patch("/apis/kubeflow.org/v1/namespaces/tightened/pytorchjobs/kept",
                         json={"metadata": {"labels": {"team": "a"}}},
                         headers={"content-type": "application/merge-patch+json"})
    assert labelled.status_code == 200, labelled.text


def test_pods_a_node_can_never_run_are_invalid_with_their_field_paths(api: httpx.Client) -> None:
    nul = pod("nul")
    nul["spec"]["containers"][0].update(args=["ok", "a\x00b"], env=[{"name": "A", "value": "\x00"}])
    status = refused(api.post("/api/v1/namespaces/default/pods", json=nul), 422, "Invalid")
    assert {c["field"] for c in status["details"]["causes"]} == {
        "spec.containers[0].args[1]", "spec.containers[0].env[0].value"}
    assert "must not contain a NUL byte" in status["message"]
    absent(api, "/api/v1/namespaces/default/pods/nul")

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "climb"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "../../.."}}],
        "containers": [{"name": "c", "image": "python:3.11", "volumeMounts": [{"name": "v", "mountPath": "data"}]}]}}}}
    status = refused(api.post("/apis/batch/v1/namespaces/default/jobs", json=job), 422, "Invalid")
    assert {c["field"] for c in status["details"]["causes"]} == {
        "spec.template.spec.volumes[0].persistentVolumeClaim.claimName",
        "spec.template.spec.containers[0].volumeMounts[0].mountPath"}
    absent(api, "/apis/batch/v1/namespaces/default/jobs/climb")


def test_the_cli_keeps_brackets_in_messages_and_sets_the_default_level(plane_with: Any, tmp_path: Path) -> None:
    plane: ControlPlaneHandle = plane_with()
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n")
    proc = plane.cli("apply", "-f", str(bad), check=False)
    assert proc.returncode != 0
    assert "[a-z0-9]([-a-z0-9]*[a-z0-9])?" in proc.stderr, proc.stderr
    # A namespace and a job in one file: the job is judged by the namespace's new labels.
    both = tmp_path / "both.yaml"
    both.write_text(f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: w, labels: {{{LABEL}warn: restricted}}}}\n"
                    "---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: plain, namespace: w}\nspec:\n"
                    "  suspend: true\n  template:\n    spec:\n      restartPolicy: Never\n"
                    "      containers: [{name: c, image: x, command: [ls]}]\n")
    warned = plane.cli("apply", "-f", str(both))
    assert 'Warning: would violate PodSecurity "restricted:latest": spec.template: allowPrivilegeEscalation' \
        in warned.stderr, warned.stderr

    from trimaran.server.daemon import stop_server

    stop_server(plane.home)
    started = plane.cli("server", "start", "--pod-security", "privileged")
    assert "control plane running" in started.stdout
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: host}\nspec:\n  suspend: true\n"
                   "  template:\n    spec:\n      restartPolicy: Never\n"
                   "      volumes: [{name: root, hostPath: {path: /}}]\n"
                   "      containers: [{name: c, image: x, command: [ls],\n"
                   "                    volumeMounts: [{name: root, mountPath: /h}]}]\n")
    assert "job.batch/host created" in plane.cli("apply", "-f", str(job)).stdout
    refused_level = plane.cli("server", "start", "--pod-security", "lax", check=False)
    assert refused_level.returncode != 0 and "privileged, baseline, restricted" in refused_level.stderr


def test_a_long_name_gives_a_hostname_without_a_trailing_dash(api: httpx.Client) -> None:
    name = "h" * 62  # its pods are named "<name>-<suffix>": cut at 63, that ends in '-'
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {
        "backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "c", "image": "python:3.11",
            "command": ["python", "-c", "import socket; print(socket.gethostname())"]}]}}}}
    assert api.post("/apis/batch/v1/namespaces/default/jobs", json=job).status_code == 201

    def succeeded() -> bool:
        status = api.get(f"/apis/batch/v1/namespaces/default/jobs/{name}").json().get("status") or {}
        assert not status.get("failed"), status
        return bool(status.get("succeeded"))

    poll(succeeded, timeout=120, what="the job to succeed")
    pods = api.get("/api/v1/namespaces/default/pods", params={"labelSelector": f"job-name={name}"}).json()["items"]
    log = api.get(f"/api/v1/namespaces/default/pods/{pods[0]['metadata']['name']}/log")
    assert log.text.strip() == name, log.text


def test_a_trial_template_from_a_config_map_meets_the_namespace_level_when_its_job_is_made(
        api: httpx.Client) -> None:
    namespace(api, "tuning")  # unlabelled: the server's default, baseline
    template = ("apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n"
                "      volumes: [{name: root, hostPath: {path: /}}]\n"
                "      containers: [{name: training, image: x, command: [python, '${trialParameters.lr}'],\n"
                "                    volumeMounts: [{name: root, mountPath: /host}]}]\n")
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "templates"}, "data": {"job.yaml": template}}
    assert api.post("/api/v1/namespaces/tuning/configmaps", json=cm).status_code == 201
    condition = 'status.conditions.#(type=="{}")#|#(status=="True")#'
    experiment = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "indirect"},
                  "spec": {"objective": {"type": "minimize", "objectiveMetricName": "loss"},
                           "algorithm": {"algorithmName": "random"}, "maxTrialCount": 1, "parallelTrialCount": 1,
                           "maxFailedTrialCount": 1,
                           "parameters": [{"name": "lr", "parameterType": "double",
                                           "feasibleSpace": {"min": "0.1", "max": "0.2"}}],
                           "trialTemplate": {"primaryContainerName": "training",
                                             "successCondition": condition.format("Complete"),
                                             "failureCondition": condition.format("Failed"),
                                             "configMap": {"configMapName": "templates", "configMapNamespace": "tuning",
                                                           "templatePath": "job.yaml"},
                                             "trialParameters": [{"name": "lr", "reference": "lr"}]}}}
    created = api.post("/apis/kubeflow.org/v1beta1/namespaces/tuning/experiments", json=experiment)
    assert created.status_code == 201, created.text

    def failed_trial() -> dict[str, Any] | None:
        for trial in api.get("/apis/kubeflow.org/v1beta1/namespaces/tuning/trials").json()["items"]:
            for cond in (trial.get("status") or {}).get("conditions") or []:
                if cond["type"] == "Failed" and cond["status"] == "True":
                    return {"name": trial["metadata"]["name"], **cond}
        return None

    failed = poll(failed_trial, timeout=60, what="the trial to fail")
    assert failed["reason"] == "FailedCreate"
    assert failed["message"] == (f'jobs.batch "{failed["name"]}" is forbidden: violates PodSecurity "baseline:latest": '
                                 'spec.template: hostPath volumes (volume "root")')
    assert api.get("/apis/batch/v1/namespaces/tuning/jobs").json()["items"] == []
