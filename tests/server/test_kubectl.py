"""kubectl (the real one) against a real control plane, through the kubeconfig it writes."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading

import pytest

from tests.conftest import shared_plane
from tests.helpers import EXAMPLES, poll

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is installed by .ci/run (Debian's kubernetes-client)")

CONFIGMAP = """
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, labels: {app: demo, tier: back}}
data: {a: "1"}
"""

JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: hello}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: python
        command: [python, -c, "print('hello from the job'); print('second line')"]
"""


# One control plane for the file: a test that lists or watches a namespace works in one of its own.
plane = shared_plane("kubectl")


@pytest.fixture
def kubectl(plane, tmp_path):  # noqa: ANN001, ANN201
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kcache"),
               HOME=str(tmp_path))

    def run(*args: str, input: str | None = None, check: bool = True, timeout: float = 120
            ) -> subprocess.CompletedProcess:
        proc = subprocess.run([KUBECTL, *args], env=env, input=input, capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    run.env = env  # type: ignore[attr-defined]
    return run


def in_namespace(kubectl, namespace: str):  # noqa: ANN001, ANN201
    """``kubectl -n NAMESPACE`` in a namespace created for the test."""
    kubectl("create", "namespace", namespace)

    def run(*args: str, **options: object) -> subprocess.CompletedProcess:
        return kubectl("-n", namespace, *args, **options)

    run.env = kubectl.env  # type: ignore[attr-defined]
    return run


def _client_minor(kubectl) -> int:  # noqa: ANN001
    version = json.loads(kubectl("version", "--client", "-o", "json").stdout)["clientVersion"]
    return int("".join(ch for ch in version["minor"] if ch.isdigit()))


def test_kubeconfig_is_private_and_needs_its_token(plane) -> None:  # noqa: ANN001
    path = plane.home / "kubeconfig"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    env = dict(plane.env, KUBECONFIG=str(path))
    anonymous = subprocess.run([KUBECTL, "get", "pods", "--token", "not-a-token"], env=env, capture_output=True,
                               text=True, timeout=60)
    assert anonymous.returncode != 0
    assert "Unauthorized" in anonymous.stderr or "credentials" in anonymous.stderr


def test_discovery_names_every_kind_with_short_names_and_categories(kubectl) -> None:  # noqa: ANN001
    out = kubectl("api-resources", "-o", "wide").stdout
    for line in ("pytorchjobs", "tfjobs", "experiments", "inferenceservices", "jobs", "pods", "events"):
        assert line in out
    assert "isvc" in out  # a short name
    assert kubectl("get", "katib").returncode == 0  # a category (experiments, trials, suggestions)
    assert kubectl("get", "nosuchcategory", check=False).returncode != 0
    version = json.loads(kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["major"] == "1"


def test_create_generators_send_protobuf_and_are_stored(kubectl) -> None:  # noqa: ANN001
    """kubectl's typed generators send core objects in protobuf, not JSON."""
    assert "namespace/team-p created" in kubectl("create", "namespace", "team-p").stdout
    kubectl("-n", "team-p", "create", "configmap", "conf", "--from-literal=lr=0.1", "--from-literal=empty=")
    kubectl("-n", "team-p", "create", "secret", "generic", "creds", "--from-literal=user=ada",
            "--type=example.com/basic")
    namespace = json.loads(kubectl("get", "namespace", "team-p", "-o", "json").stdout)
    assert namespace["status"]["phase"] == "Active"
    conf = json.loads(kubectl("-n", "team-p", "get", "cm", "conf", "-o", "json").stdout)
    assert conf["data"] == {"lr": "0.1", "empty": ""}
    creds = json.loads(kubectl("-n", "team-p", "get", "secret", "creds", "-o", "json").stdout)
    assert creds["type"] == "example.com/basic"
    assert kubectl("-n", "team-p", "get", "secret", "creds", "-o", "jsonpath={.data.user}").stdout == "YWRh"
    # The pull Secret and the ServiceAccount that names it, as a user sets up a private registry.
    kubectl("-n", "team-p", "create", "secret", "docker-registry", "regcred", "--docker-server=127.0.0.1:5000",
            "--docker-username=ada", "--docker-password=pw")
    kubectl("-n", "team-p", "create", "serviceaccount", "puller")
    kubectl("-n", "team-p", "patch", "serviceaccount", "puller", "-p", '{"imagePullSecrets": [{"name": "regcred"}]}')
    regcred = json.loads(kubectl("-n", "team-p", "get", "secret", "regcred", "-o", "json").stdout)
    assert regcred["type"] == "kubernetes.io/dockerconfigjson" and ".dockerconfigjson" in regcred["data"]
    puller = json.loads(kubectl("-n", "team-p", "get", "serviceaccount", "puller", "-o", "json").stdout)
    assert puller["imagePullSecrets"] == [{"name": "regcred"}]
    # An invalid name is refused whole, as from JSON.
    bad = kubectl("create", "namespace", "Not_Valid", check=False)
    assert bad.returncode != 0 and "Invalid" in bad.stderr
    assert kubectl("get", "namespace", "Not_Valid", check=False).returncode != 0


def test_apply_get_label_patch_delete(kubectl) -> None:  # noqa: ANN001
    kubectl = in_namespace(kubectl, "labels")
    assert "configmap/settings created" in kubectl("apply", "-f", "-", input=CONFIGMAP).stdout
    assert "unchanged" in kubectl("apply", "-f", "-", input=CONFIGMAP).stdout
    kubectl("label", "configmap", "settings", "owner=me")
    kubectl("annotate", "configmap", "settings", "note=x")
    kubectl("patch", "configmap", "settings", "--type=merge", "-p", '{"data":{"b":"2"}}')
    kubectl("patch", "configmap", "settings", "--type=json", "-p", '[{"op":"replace","path":"/data/a","value":"3"}]')
    kubectl("patch", "configmap", "settings", "-p", '{"data":{"c":"4"}}')  # strategic merge on a core kind
    got = json.loads(kubectl("get", "cm", "settings", "-o", "json").stdout)
    assert got["data"] == {"a": "3", "b": "2", "c": "4"}
    assert got["metadata"]["labels"]["owner"] == "me" and got["metadata"]["annotations"]["note"] == "x"
    assert kubectl("get", "cm", "-l", "tier in (back,front),!missing", "-o", "name").stdout.split() == \
        ["configmap/settings"]
    assert kubectl("get", "cm", "-l", "tier=front", "-o", "name").stdout.strip() == ""
    assert kubectl("get", "cm", "settings", "-o", "jsonpath={.data.b}").stdout == "2"
    wide = kubectl("get", "cm", "-A").stdout
    assert wide.splitlines()[0].split()[:3] == ["NAMESPACE", "NAME", "DATA"]
    assert 'configmap "settings" deleted' in kubectl("delete", "cm", "settings").stdout
    missing = kubectl("get", "cm", "settings", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_a_bad_manifest_is_refused_whole_with_the_field_path(kubectl) -> None:  # noqa: ANN001
    kubectl = in_namespace(kubectl, "refused")
    bad = (EXAMPLES / "pytorch-ddp" / "pytorchjob.yaml").read_text().replace("replicas: 2", "replicas: -2")
    refused = kubectl("apply", "-f", "-", input=bad, check=False)
    assert refused.returncode != 0
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in refused.stderr and "Invalid value: -2" in refused.stderr
    strict = kubectl("apply", "-f", "-", input=CONFIGMAP + "extra: 1\n", check=False)
    if _client_minor(kubectl) >= 27:  # kubectl sends fieldValidation=Strict, which the server honours
        assert strict.returncode != 0 and 'unknown field "extra"' in strict.stderr
        assert kubectl("get", "cm", "-o", "name").stdout.strip() == ""
    else:  # older kubectl sends no fieldValidation: the server's default is to warn and drop it
        assert strict.returncode == 0 and 'unknown field "extra"' in strict.stderr
        assert "extra" not in json.loads(kubectl("get", "cm", "settings", "-o", "json").stdout)


def test_custom_resource_printer_columns_and_strategic_patch_refusal(kubectl) -> None:  # noqa: ANN001
    kubectl = in_namespace(kubectl, "printer")
    kubectl("apply", "-f", str(EXAMPLES / "pytorch-ddp" / "code-configmap.yaml"))
    kubectl("apply", "-f", str(EXAMPLES / "pytorch-ddp" / "pvc.yaml"))
    kubectl("apply", "--server-side", "-f", str(EXAMPLES / "pytorch-ddp" / "pytorchjob.yaml"))
    header = kubectl("get", "pytorchjobs").stdout.splitlines()[0].split()
    assert header == ["NAME", "STATE", "AGE"]
    refused = kubectl("patch", "pytorchjob", "digits-ddp", "-p", '{"metadata":{"labels":{"a":"b"}}}', check=False)
    assert refused.returncode != 0 and "strategic-merge-patch+json" in refused.stderr
    kubectl("scale", "pytorchjob", "digits-ddp", "--replicas=3")
    replicas = kubectl("get", "pytorchjob", "digits-ddp", "-o", "jsonpath={.spec.pytorchReplicaSpecs.Worker.replicas}")
    assert replicas.stdout == "3"
    pods = poll(lambda: kubectl("get", "pods", "-l", "training.kubeflow.org/job-name=digits-ddp", "-o",
                                "name").stdout.split(), timeout=60, what="the job's pods")
    assert pods
    kubectl("wait", "--for=condition=Succeeded", "pytorchjob/digits-ddp", "--timeout=240s", timeout=300)
    described = kubectl("describe", "pytorchjob", "digits-ddp").stdout
    assert "PyTorchJobSucceeded" in described and "Replica Statuses" in described
    kubectl("delete", "pytorchjob", "digits-ddp", timeout=120)
    poll(lambda: not kubectl("get", "pods", "-o", "name").stdout.strip(), timeout=60, what="pods to go")


def test_logs_and_watch_of_a_batch_job(kubectl) -> None:  # noqa: ANN001
    kubectl = in_namespace(kubectl, "watched")
    lines: list[str] = []
    watcher = subprocess.Popen([KUBECTL, "-n", "watched", "get", "jobs", "-w", "--request-timeout=60s"],
                               env=kubectl.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    reader = threading.Thread(target=lambda: lines.extend(watcher.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        kubectl("create", "-f", "-", input=JOB)
        kubectl("wait", "--for=condition=Complete", "job/hello", "--timeout=120s", timeout=150)
        pod = kubectl("get", "pods", "-l", "batch.kubernetes.io/job-name=hello", "-o", "name").stdout.strip()
        assert pod.startswith("pod/hello-")
        assert kubectl("logs", pod).stdout == "hello from the job\nsecond line\n"
        assert kubectl("logs", pod, "--tail=1").stdout == "second line\n"
        assert kubectl("logs", "-l", "batch.kubernetes.io/job-name=hello").stdout.endswith("second line\n")
        poll(lambda: any("Complete" in line for line in lines), timeout=30, what="the watch to show Complete")
        assert lines[0].split()[:2] == ["NAME", "STATUS"]
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)


def test_namespaced_token_is_forbidden_elsewhere(plane, kubectl) -> None:  # noqa: ANN001
    from trimaran.server.tokens import TokenStore

    token = TokenStore(plane.home).create("edit", ["team-a"])
    kubectl("create", "-f", "-", input="apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n")
    ok = kubectl("--token", token, "-n", "team-a", "apply", "-f", "-", input=CONFIGMAP)
    assert "created" in ok.stdout
    denied = kubectl("--token", token, "-n", "default", "get", "cm", check=False)
    assert denied.returncode != 0 and "Forbidden" in denied.stderr
    everywhere = kubectl("--token", token, "get", "cm", "-A", check=False)
    assert everywhere.returncode != 0 and "Forbidden" in everywhere.stderr
    viewer = plane.cli("token", "create", "--namespace", "team-a", "--role", "view").stdout.strip()
    # The control plane makes a cluster-wide view token for Prometheus; this one is team-a's.
    assert any(line.split()[-2:] == ["view", "team-a"] for line in plane.cli("token", "list").stdout.splitlines())
    readonly = kubectl("--token", viewer, "-n", "team-a", "delete", "cm", "settings", check=False)
    assert readonly.returncode != 0 and "Forbidden" in readonly.stderr
    assert kubectl("-n", "team-a", "get", "cm", "settings", "-o", "name").stdout.strip() == "configmap/settings"
    # As Kubernetes' view role: everything but Secrets, which an edit token reads.
    kubectl("-n", "team-a", "create", "secret", "generic", "creds", "--from-literal=k=v")
    assert kubectl("--token", viewer, "-n", "team-a", "get", "cm", "settings", "-o", "name").returncode == 0
    hidden = kubectl("--token", viewer, "-n", "team-a", "get", "secret", "creds", check=False)
    assert hidden.returncode != 0 and "Forbidden" in hidden.stderr
    assert kubectl("--token", token, "-n", "team-a", "get", "secret", "creds", "-o", "name").stdout.strip() == \
        "secret/creds"



SLEEPER = """
apiVersion: batch/v1
kind: Job
metadata: {name: sleeper}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: python
        command: [python, -c, "import time; time.sleep(300)"]
"""


def _running_pod(kubectl) -> str:  # noqa: ANN001
    def running() -> str:
        out = kubectl("get", "pods", "-l", "batch.kubernetes.io/job-name=sleeper",
                      "-o", "jsonpath={.items[?(@.status.phase=='Running')].metadata.name}").stdout
        return out.strip()

    return poll(running, timeout=60, what="the sleeper's pod to run")


def test_foreground_deletion_waits_for_the_pods_then_removes_the_job(kubectl) -> None:  # noqa: ANN001
    kubectl = in_namespace(kubectl, "foreground")
    kubectl("create", "-f", "-", input=SLEEPER)
    pod = _running_pod(kubectl)
    kubectl("wait", "--for=condition=Ready", f"pod/{pod}", "--timeout=60s", timeout=90)
    conditions = json.loads(kubectl("get", "pod", pod, "-o", "jsonpath={.status.conditions}").stdout)
    assert {c["type"]: c["status"] for c in conditions} == {
        "PodScheduled": "True", "Initialized": "True", "ContainersReady": "True", "Ready": "True"}
    kubectl("delete", "job", "sleeper", "--cascade=foreground", "--timeout=90s", timeout=120)
    assert kubectl("get", "job", "sleeper", check=False).returncode != 0
    assert kubectl("get", "pod", pod, check=False).returncode != 0


def test_orphan_deletion_leaves_the_pod_running_without_its_owner(kubectl) -> None:  # noqa: ANN001
    kubectl = in_namespace(kubectl, "orphan")
    kubectl("create", "-f", "-", input=SLEEPER)
    pod = _running_pod(kubectl)
    kubectl("delete", "job", "sleeper", "--cascade=orphan", "--timeout=60s", timeout=90)
    assert kubectl("get", "job", "sleeper", check=False).returncode != 0
    left = json.loads(kubectl("get", "pod", pod, "-o", "json").stdout)
    assert left["status"]["phase"] == "Running" and not left["metadata"].get("ownerReferences")
    kubectl("delete", "pod", pod, "--timeout=60s", timeout=90)


def test_deleting_a_namespace_deletes_what_is_in_it(kubectl) -> None:  # noqa: ANN001
    kubectl("create", "-f", "-", input="apiVersion: v1\nkind: Namespace\nmetadata: {name: scratch}\n")
    kubectl("-n", "scratch", "apply", "-f", "-", input=CONFIGMAP)
    kubectl("-n", "scratch", "create", "-f", "-", input=SLEEPER)
    poll(lambda: kubectl("-n", "scratch", "get", "pods", "-o", "name").stdout.strip(), timeout=60,
         what="the sleeper's pod")
    kubectl("delete", "namespace", "scratch", "--timeout=90s", timeout=120)
    assert kubectl("get", "namespace", "scratch", check=False).returncode != 0
    assert kubectl("get", "cm,jobs,pods", "-n", "scratch", "-o", "name").stdout.strip() == ""


def _job(name: str, line: str) -> str:
    return f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: python
        command: [python, -c, "print('{line}')"]
---
"""


def test_logs_of_a_job_are_its_own_pods_with_two_jobs_in_a_namespace(kubectl) -> None:  # noqa: ANN001
    run = in_namespace(kubectl, "two-jobs")
    run("apply", "-f", "-", input=_job("first", "from the first job") + _job("second", "from the second job"))
    run("wait", "--for=condition=Complete", "job/first", "job/second", "--timeout=120s")
    for name, other in (("first", "second"), ("second", "first")):
        job = json.loads(run("get", "job", name, "-o", "json").stdout)
        uid = job["metadata"]["uid"]
        # As kube-apiserver defaults it: a selector of the Job's uid, and the labels on its template.
        assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert labels == {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                          "batch.kubernetes.io/job-name": name, "job-name": name}
        out = run("logs", f"job/{name}").stdout
        assert out.strip() == f"from the {name} job", out
        assert other not in out
    # The selector is the Job's to keep; one chosen by hand must say so (manualSelector) and match.
    refused = run("apply", "-f", "-", check=False, input=_job("manual", "x").replace(
        "  template:", "  selector: {matchLabels: {team: a}}\n  template:"))
    assert refused.returncode != 0 and "`selector` not auto-generated" in refused.stderr, refused.stderr
    refused = run("apply", "-f", "-", check=False, input=_job("manual", "x").replace(
        "  template:", "  manualSelector: true\n  selector: {matchLabels: {team: a}}\n  template:"))
    assert "spec.template.metadata.labels: Invalid value" in refused.stderr, refused.stderr
    assert "`selector` does not match template `labels`" in refused.stderr
    run("apply", "-f", "-", input=_job("manual", "x").replace(
        "  template:", "  manualSelector: true\n  selector: {matchLabels: {team: a}}\n  template:").replace(
        "    spec:\n      restartPolicy", "    metadata: {labels: {team: a}}\n    spec:\n      restartPolicy"))
    manual = json.loads(run("get", "job", "manual", "-o", "json").stdout)
    assert manual["spec"]["selector"] == {"matchLabels": {"team": "a"}}
    assert "controller-uid" not in manual["spec"]["template"]["metadata"]["labels"]
